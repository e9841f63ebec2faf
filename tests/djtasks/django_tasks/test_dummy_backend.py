from typing import cast
from unittest import mock

from cogworker_django.tasks_backend import CogworkerBackend  # port: under test
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.base import Task
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test import SimpleTestCase, TransactionTestCase, override_settings

from . import tasks as test_tasks
from .support import COGWORKER_BACKEND, afinished, enqueue_records, finished  # port


@override_settings(
    TASKS={
        "default": {
            "BACKEND": COGWORKER_BACKEND,  # port: was DummyBackend
            "QUEUES": [],
        }
    }
)
class DummyBackendTestCase(SimpleTestCase):
    # port: setUp removed (it emptied DummyBackend's in-memory results)

    def test_using_correct_backend(self):
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], CogworkerBackend)  # port
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {})

    def test_enqueue_task(self):
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = cast(Task, task).enqueue(1, two=3)

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertIs(result.is_finished, False)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 0)

                self.assertTrue(default_task_backend.get_result(result.id))  # port

    async def test_enqueue_task_async(self):
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = await cast(Task, task).aenqueue()

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertIs(result.is_finished, False)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 0)

                self.assertTrue(default_task_backend.get_result(result.id))  # port

    def test_get_result(self):
        result = finished(  # port: the worker has run it
            default_task_backend.enqueue(test_tasks.noop_task, (), {})
        )  # port

        new_result = default_task_backend.get_result(result.id)

        self.assertEqual(result, new_result)

    async def test_get_result_async(self):
        result = await afinished(  # port: the worker has run it
            await default_task_backend.aenqueue(test_tasks.noop_task, (), {})
        )  # port

        new_result = await default_task_backend.aget_result(result.id)

        self.assertEqual(result, new_result)

    def test_refresh_result(self):
        result = default_task_backend.enqueue(
            test_tasks.calculate_meaning_of_life, (), {}
        )

        # port: two lines removed (they set the status in DummyBackend's memory): the
        # port: worker runs the task, and the refresh reads its result from Redis.

        self.assertEqual(result.status, TaskResultStatus.READY)
        finished(result)  # port: was result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    async def test_refresh_result_async(self):
        result = await default_task_backend.aenqueue(
            test_tasks.calculate_meaning_of_life, (), {}
        )

        # port: two lines removed (they set the status in DummyBackend's memory): the
        # port: worker runs the task, and the refresh reads its result from Redis.

        self.assertEqual(result.status, TaskResultStatus.READY)
        await afinished(result)  # port: was await result.arefresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    async def test_get_missing_result(self):
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result("123")

        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("123")

    def test_enqueue_logs(self):
        with self.assertLogs("django.tasks", level="DEBUG") as captured_logs:
            result = test_tasks.noop_task.enqueue()
        output = enqueue_records(captured_logs.output)  # port: not the run's

        self.assertEqual(len(output), 1)
        self.assertIn("enqueued", output[0])
        self.assertIn(result.id, output[0])

    def test_errors(self):
        result = test_tasks.noop_task.enqueue()
        self.assertEqual(result.errors, [])

    def test_validate_disallowed_async_task(self):
        with mock.patch.multiple(default_task_backend, supports_async_task=False):
            with self.assertRaisesMessage(
                InvalidTask, "Backend does not support async Tasks."
            ):
                default_task_backend.validate_task(test_tasks.noop_task_async)

    def test_check(self):
        errors = list(default_task_backend.check())
        self.assertEqual(len(errors), 0, errors)

    def test_takes_context(self):
        result = test_tasks.get_task_id.enqueue()
        self.assertEqual(result.status, TaskResultStatus.READY)

    # port: test_clear removed: clear() is DummyBackend's (its in-memory results); results
    # port: here live in Redis for RESULT_TTL (tests/djtasks/test_tasks_worker.py).

    def test_validate_on_enqueue(self):
        task_with_custom_queue_name = test_tasks.noop_task.using(
            queue_name="unknown_queue"
        )

        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": COGWORKER_BACKEND,  # port: was DummyBackend
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
                    "BACKEND": COGWORKER_BACKEND,  # port: was DummyBackend
                    "QUEUES": ["queue-1"],
                }
            }
        ):
            with self.assertRaisesMessage(
                InvalidTask, "Queue 'unknown_queue' is not valid for backend"
            ):
                await task_with_custom_queue_name.aenqueue()


class DummyBackendTransactionTestCase(TransactionTestCase):
    available_apps = []

    @override_settings(
        TASKS={
            "default": {
                "BACKEND": COGWORKER_BACKEND,  # port: was DummyBackend
            }
        }
    )
    def test_doesnt_wait_until_transaction_commit_by_default(self):
        with transaction.atomic():
            result = test_tasks.noop_task.enqueue()

            self.assertIsNotNone(result.enqueued_at)

            finished(result)  # port: was len(results) == 1: pushed at once, and run

        self.assertIs(result.is_finished, True)  # port: was len(results)
