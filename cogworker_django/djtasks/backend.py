"""``CogworkerBackend``: Django's task API (``django.tasks``, Django 6.0+) over cogworker.

A task becomes a cogworker job: ``"kind": "task"``, ``func`` = the task's
``module_path``, ``jid`` = the result id, its JSON-normalised arguments, its queue,
``priority`` and backend alias, ``retry`` from the backend's ``OPTIONS``, and ``at``
(the schedule) for ``run_after``. The same workers, retries, dead set and admin then
apply. Results live in ``P:result:<id>`` (store.py) for ``RESULT_TTL``.

Settings::

    TASKS = {"default": {"BACKEND": "cogworker_django.tasks_backend.CogworkerBackend",
                         "QUEUES": ["default", "low"],       # Django's: queues tasks may use
                         "OPTIONS": {"RETRY": True}}}        # True (25 attempts), False/0, or n
"""

from __future__ import annotations

import logging
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend
from django.tasks.signals import task_enqueued

from .. import conf
from ..core import client, jobs, payload
from ..workflows import context as workflow
from . import KIND, resolve, results, runner, store

log = logging.getLogger("cogworker_django")

OPTION_NAMES = ("RETRY", "DURABLE")
# As for @job: retry=True means payload.DEFAULT_MAX_RETRIES (25) attempts with backoff.
DEFAULT_RETRY = True


def _retry_option(alias: str, options: Any) -> bool | int:
    if not isinstance(options, dict):
        raise InvalidTaskBackend(f"TASKS[{alias!r}]['OPTIONS'] must be a dict, got {options!r}.")
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise InvalidTaskBackend(
            f"TASKS[{alias!r}]['OPTIONS'] has unknown key(s) {unknown}; allowed: "
            f"{list(OPTION_NAMES)}."
        )
    retry = options.get("RETRY", DEFAULT_RETRY)
    if not isinstance(retry, (bool, int)) or (not isinstance(retry, bool) and retry < 0):
        raise InvalidTaskBackend(
            f"TASKS[{alias!r}]['OPTIONS']['RETRY'] = {retry!r} is invalid: expected True "
            "(25 attempts), False (none) or a count >= 0."
        )
    return retry


def _valid_queue_name(name: Any) -> bool:
    return conf.valid_name(name)


class CogworkerBackend(BaseTaskBackend):
    # How resolve.is_ours recognises this backend (and its subclasses).
    is_cogworker_backend = True
    # run_after: the job waits in the schedule (P:schedule) until then.
    supports_defer = True
    # async def tasks run to completion in the worker (Task.call).
    supports_async_task = True
    # Results are in Redis for RESULT_TTL, readable from any process.
    supports_get_result = True
    # -100..100, strictly higher first within a queue (priority.py).
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.retry = _retry_option(alias, self.options)
        # Tasks written as outbox rows in the caller's transaction (durable/, docs/jobs.md).
        self.durable = self.options.get("DURABLE", False)
        if not isinstance(self.durable, bool):
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS']['DURABLE'] = {self.durable!r} is invalid: "
                "expected True or False."
            )
        bad = sorted(str(q) for q in self.queues if not _valid_queue_name(q))
        if bad:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['QUEUES'] has invalid queue name(s) {bad}: a queue name "
                "is a non-empty string without whitespace."
            )

    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        # A worker runs only tasks declared for a CogworkerBackend (resolve.py), so one
        # declared for another backend and re-routed here with .using() is refused now
        # rather than in the worker. (While @task builds the declared task itself, its
        # name is not bound yet: nothing to compare.)
        origin = resolve.declared(task)
        if origin is not None and origin.backend != task.backend:
            from django.tasks import task_backends

            if not isinstance(task_backends[origin.backend], CogworkerBackend):
                raise InvalidTask(
                    f"{task.module_path} is declared for the task backend "
                    f"{origin.backend!r}; cogworker workers run only tasks declared for a "
                    "CogworkerBackend."
                )
        # Django skips the queue check when QUEUES is empty; a cogworker queue still needs
        # a usable name.
        if not _valid_queue_name(task.queue_name):
            raise InvalidTask(
                f"Queue {task.queue_name!r} is not a valid queue name: a non-empty string "
                "without whitespace."
            )

    # Enqueue ------------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        # TaskResult normalises the arguments to JSON types as Django does; its TypeError
        # for anything else ("Unsupported type: <class ...>") does not say which
        # argument, so the payload's check says it instead.
        try:
            result: TaskResult[..., Any] = TaskResult(
                task=task,
                id=payload.new_jid(),
                status=TaskResultStatus.READY,
                enqueued_at=None,
                started_at=None,
                last_attempted_at=None,
                finished_at=None,
                args=args,
                kwargs=kwargs,
                backend=self.alias,
                errors=[],
                worker_ids=[],
            )
        except TypeError as exc:
            try:
                payload.encode({"func": task.module_path, "args": list(args), "kwargs": kwargs})
            except TypeError as named:  # Django's words first: its own tests match them
                raise TypeError(f"{exc}: {named}") from None
            raise  # (something the payload could hold: Django's own error, as it is)
        job = self._job(task, result)
        # A member of the batch whose block is open here, if any.
        workflow.stamp(job, self.durable, None, self.durable)
        payload.encode(job)  # a TypeError naming the argument, before anything is pushed
        if self.durable:
            return self._enqueue_durable(task, job, result)
        if client.push(job) is None:
            return _stopped(task, result)
        object.__setattr__(result, "enqueued_at", store.from_epoch(job["created_at"]))
        # Test modes (cogworker's testing.fake()/inline()) keep results out of Redis.
        if client.active_sink() is None:
            waits = float(job["at"]) - job["created_at"] if "at" in job else 0.0
            store.create(job, extra_ttl=waits)  # kept at least until run_after
        task_enqueued.send(type(self), task_result=result)
        return result

    def _enqueue_durable(self, task: Any, job: dict[str, Any], result: TaskResult) -> TaskResult:
        """An outbox row in the caller's transaction; its READY result is written at the
        commit (best effort, as after a push: a rolled-back task has none)."""
        from django.db import transaction

        from ..durable import writer

        if writer.enqueue(job, None, None) is None:
            return _stopped(task, result)
        object.__setattr__(result, "enqueued_at", store.from_epoch(job["created_at"]))
        if client.active_sink() is None:
            waits = float(job["at"]) - job["created_at"] if "at" in job else 0.0
            transaction.on_commit(
                lambda: store.create(job, extra_ttl=waits), using=writer.database(None)
            )
        task_enqueued.send(type(self), task_result=result)
        return result

    def _job(self, task: Any, result: TaskResult) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "kind": KIND,
            "priority": task.priority,
            "backend": self.alias,
        }
        if task.run_after is not None:
            run_after = task.run_after
            if run_after.tzinfo is None:  # USE_TZ = False: naive, in the default time zone
                from django.utils import timezone

                run_after = timezone.make_aware(run_after)
            extra["at"] = run_after.timestamp()
            extra["run_after"] = store.iso(extra["at"])
        return payload.build(
            task.module_path,
            result.args,
            result.kwargs,
            queue=task.queue_name,
            retry=self.retry,
            jid=result.id,
            **extra,
        )

    # Results ------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        return results.load(result_id)

    # System checks ------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        try:
            settings = conf.get()
        except ImproperlyConfigured:
            return []  # cogworker.E001 reports it
        # Settings only: Django runs this before every command, and Redis being down must
        # not stop `migrate` (the deployment checks of cogworker.checks talk to Redis).
        found: list[checks.CheckMessage] = []
        served = set(settings.queue_names)
        for queue in sorted(self.queues - served):
            found.append(
                checks.Warning(
                    f"Task backend {self.alias!r} accepts queue {queue!r}, which is not in "
                    "COGWORKER['QUEUES']: workers started without '-q "
                    f"{queue}' never run its tasks.",
                    hint="Add it to COGWORKER['QUEUES'], or run workers with -q.",
                    id="cogworker.tasks.W010",
                )
            )
        return found


# A worker runs "task" payloads through runner.resolver (never anything else it names).
jobs.register_kind(KIND, runner.resolver)


def _stopped(task: Any, result: TaskResult) -> TaskResult:
    """The result of a task a client middleware stopped (said in the log: it won't run)."""
    log.warning(
        "task %s (%s): a client middleware stopped the push; it will not run",
        result.id,
        task.module_path,
    )
    return result
