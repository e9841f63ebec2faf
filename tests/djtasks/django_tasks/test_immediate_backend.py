from cogworker_django.tasks_backend import CogworkerBackend  # port: under test
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist  # port: below
from django.test import SimpleTestCase, TransactionTestCase, override_settings
from django.utils import timezone

from . import tasks as test_tasks
from .support import (
    COGWORKER_BACKEND,
    NO_RETRY,
    afinished,
    enqueued_first,
    finished,
)  # port


@override_settings(
    TASKS={
        "default": {
            "BACKEND": COGWORKER_BACKEND,  # port: was ImmediateBackend
            "QUEUES": [],
            "OPTIONS": NO_RETRY,  # port: the first failure is FAILED, as Immediate's
        }
    }
)
class ImmediateBackendTestCase(SimpleTestCase):
    def test_using_correct_backend(self):
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], CogworkerBackend)  # port
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, NO_RETRY)  # port: its OPTIONS

    def test_enqueue_task(self):
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = finished(task.enqueue(1, two=3))  # port: run by the worker

                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertIs(result.is_finished, True)
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)
                self.assertGreaterEqual(result.finished_at, result.started_at)
                self.assertIsNone(result.return_value)
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 1)

    async def test_enqueue_task_async(self):
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = await afinished(await task.aenqueue())  # port: worker

                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertIs(result.is_finished, True)
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)
                self.assertGreaterEqual(result.finished_at, result.started_at)
                self.assertIsNone(result.return_value)
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 1)

    def test_catches_exception(self):
        test_data = [
            (
                test_tasks.failing_task_value_error,  # Task function.
                ValueError,  # Expected exception.
                "This Task failed due to ValueError",  # Expected message.
            ),
            (
                test_tasks.failing_task_system_exit,
                SystemExit,
                "This Task failed due to SystemExit",
            ),
        ]
        for task, exception, message in test_data:
            with (
                self.subTest(task),
                self.assertLogs("django.tasks", level="ERROR") as captured_logs,
            ):
                result = finished(task.enqueue())  # port: run by the worker

                self.assertEqual(len(captured_logs.output), 1)
                self.assertIn(message, captured_logs.output[0])

                self.assertEqual(result.status, TaskResultStatus.FAILED)
                with self.assertRaisesMessage(ValueError, "Task failed"):
                    result.return_value
                self.assertIs(result.is_finished, True)
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)
                self.assertGreaterEqual(result.finished_at, result.started_at)
                self.assertEqual(result.errors[0].exception_class, exception)
                traceback = result.errors[0].traceback
                self.assertIs(
                    traceback
                    and traceback.endswith(f"{exception.__name__}: {message}\n"),
                    True,
                    traceback,
                )
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})

    def test_throws_keyboard_interrupt(self):
        # port: in a worker a task's KeyboardInterrupt is the task's failure (signals reach
        # port: only the worker's main thread, so it can only come from the task): FAILED
        # port: and logged as any failure, where ImmediateBackend lets it reach the caller.
        with self.assertLogs("django.tasks", level="ERROR"):  # port: was assertNoLogs
            result = finished(  # port: was assertRaises(KeyboardInterrupt)
                default_task_backend.enqueue(
                    test_tasks.failing_task_keyboard_interrupt, [], {}
                )
            )  # port
        self.assertEqual(result.status, TaskResultStatus.FAILED)  # port
        self.assertEqual(result.errors[0].exception_class, KeyboardInterrupt)  # port

    def test_complex_exception(self):
        with self.assertLogs("django.tasks", level="ERROR"):
            result = finished(test_tasks.complex_exception.enqueue())  # port

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            result.return_value
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)
        self.assertGreaterEqual(result.finished_at, result.started_at)

        self.assertIsNone(result._return_value)
        self.assertEqual(result.errors[0].exception_class, ValueError)
        self.assertIn(
            'ValueError(ValueError("This task failed"))', result.errors[0].traceback
        )

        self.assertEqual(result.task, test_tasks.complex_exception)
        self.assertEqual(result.args, [])
        self.assertEqual(result.kwargs, {})

    def test_complex_return_value(self):
        with self.assertLogs("django.tasks", level="ERROR"):
            result = finished(test_tasks.complex_return_value.enqueue())  # port: worker

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)
        self.assertGreaterEqual(result.finished_at, result.started_at)
        self.assertIsNone(result._return_value)
        self.assertEqual(result.errors[0].exception_class, TypeError)
        self.assertIn("Unsupported type", result.errors[0].traceback)

    def test_result(self):
        result = finished(  # port: run by the worker
            default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, [], {})
        )  # port

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 42)

    async def test_result_async(self):
        result = await afinished(  # port: run by the worker
            await default_task_backend.aenqueue(
                test_tasks.calculate_meaning_of_life, [], {}
            )
        )  # port

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 42)

    # port: this backend supports get_result (supports_get_result): an unknown id is
    # port: TaskResultDoesNotExist, and a result refreshes from Redis.
    async def test_cannot_get_result(self):
        with self.assertRaises(TaskResultDoesNotExist):  # port: was NotImplementedError
            default_task_backend.get_result("123")

        with self.assertRaises(TaskResultDoesNotExist):  # port: was NotImplementedError
            await default_task_backend.aget_result(123)

    async def test_cannot_refresh_result(self):
        result = await default_task_backend.aenqueue(
            test_tasks.calculate_meaning_of_life, (), {}
        )

        result = await afinished(result)  # port: arefresh until the worker has run it
        self.assertEqual(result.return_value, 42)  # port: was NotImplementedError
        result.refresh()  # port: was NotImplementedError
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)  # port

    def test_cannot_pass_run_after(self):
        # port: this backend supports run_after (supports_defer): the task is valid.
        default_task_backend.validate_task(
            test_tasks.failing_task_value_error.using(run_after=timezone.now())
        )

    def test_enqueue_logs(self):
        with self.assertLogs("django.tasks", level="DEBUG") as captured_logs:
            result = finished(test_tasks.noop_task.enqueue())  # port: run by the worker
        output = enqueued_first(captured_logs.output)  # port: two threads

        self.assertEqual(len(output), 3)

        self.assertIn("enqueued", output[0])
        self.assertIn(result.id, output[0])

        self.assertIn("state=RUNNING", output[1])
        self.assertIn(result.id, output[1])

        self.assertIn("state=SUCCESSFUL", output[2])
        self.assertIn(result.id, output[2])

    def test_failed_logs(self):
        with self.assertLogs("django.tasks", level="DEBUG") as captured_logs:
            task = test_tasks.failing_task_value_error  # port: a shorter line below
            result = finished(task.enqueue())  # port: run by the worker
        output = enqueued_first(captured_logs.output)  # port: two threads

        self.assertEqual(len(output), 3)
        self.assertIn("state=RUNNING", output[1])
        self.assertIn(result.id, output[1])

        self.assertIn("state=FAILED", output[2])
        self.assertIn(result.id, output[2])

    def test_successful_task_no_none_in_logs(self):
        with self.assertLogs("django.tasks", level="DEBUG") as captured_logs:
            result = finished(test_tasks.noop_task.enqueue())  # port: run by the worker

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

        for log_output in captured_logs.output:
            self.assertNotIn("None", log_output)

    def test_takes_context(self):
        result = finished(test_tasks.get_task_id.enqueue())  # port: run by the worker

        self.assertEqual(result.return_value, result.id)

    def test_context(self):
        result = finished(test_tasks.test_context.enqueue(1))  # port: run by the worker
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    def test_validate_on_enqueue(self):
        task_with_custom_queue_name = test_tasks.noop_task.using(
            queue_name="unknown_queue"
        )

        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": COGWORKER_BACKEND,  # port: was ImmediateBackend
                    "QUEUES": ["queue-1"],
                }
            }
        ):
            with self.assertRaisesMessage(
                InvalidTask, "Queue 'unknown_queue' is not valid for backend"
            ):
                task_with_custom_queue_name.enqueue()

    async def test_validate_on_aenqueue(self):
        task_with_custom_queue_name = test_tasks.noop_task.using(
            queue_name="unknown_queue"
        )

        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": COGWORKER_BACKEND,  # port: was ImmediateBackend
                    "QUEUES": ["queue-1"],
                }
            }
        ):
            with self.assertRaisesMessage(
                InvalidTask, "Queue 'unknown_queue' is not valid for backend"
            ):
                await task_with_custom_queue_name.aenqueue()


class ImmediateBackendTransactionTestCase(TransactionTestCase):
    available_apps = []

    @override_settings(
        TASKS={
            "default": {
                "BACKEND": COGWORKER_BACKEND,  # port: was ImmediateBackend
            }
        }
    )
    def test_doesnt_wait_until_transaction_commit_by_default(self):
        with transaction.atomic():
            result = finished(test_tasks.noop_task.enqueue())  # port: run by the worker

            self.assertIsNotNone(result.enqueued_at)

            self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
