"""A task's run as Django sees it: result writes and signals around each run.

Driven by ``TaskResultMiddleware`` for ``"task"`` payloads:

1. start: RUNNING, this worker's id appended to ``worker_ids`` (``store.start``,
   best-effort). The ``TaskResult`` as written is kept for the run's thread
   (:func:`current`, so ``TaskContext.attempt`` counts every run, retries included) and
   sent with ``task_started``;
2. the run: the rest of the server chain, then ``runner.run``;
3. end: SUCCESSFUL with the return value; or the error appended and READY (a retry is
   due) or FAILED (retries spent or disabled); or READY again when a middleware
   rescheduled the run. ``store.finish`` makes sure it lands. ``task_finished`` follows
   each run, sent from inside the ``except`` block on a failure, so receivers see
   ``sys.exc_info()`` as with Django's own backends.

Signals go out with ``send_robust``: a receiver that raises is logged and never fails
the task (rule 4), where Django's ImmediateBackend would let it propagate.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from django.tasks import Task, TaskResult, TaskResultStatus, task_backends
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started

from ..core import jobs, locks, middleware, unique
from ..store.errors import describe
from ..worker import failures
from . import resolve, results, store, worker_setup

log = logging.getLogger("cogworker_django")

# The run's result: a context variable, so that an async task's coroutine, awaited on
# the worker's event loop while this middleware waits on a helper thread, sees it too
# (worker/aio_chain.py runs the rest of the chain in this context); in a processor
# thread it is as good as a thread-local.
_result: ContextVar[TaskResult | None] = ContextVar("cogworker_task_result", default=None)


def current() -> TaskResult | None:
    """Inside a task's run: its result as the start write left it."""
    return _result.get()


def result_from_payload(task: Task, job: dict[str, Any], **fields: str) -> TaskResult:
    """A result built from the payload alone (when Redis could not say more)."""
    return results.build(task, job["jid"], {**store.base_fields(job), **fields})


def _retry_grace(job: dict[str, Any]) -> float:
    """About how long until the retry runs: the result must outlive the wait."""
    try:
        n = int(job.get("retry_count") or 0) + 1
        return failures.backoff(n) + 10 * n + 60
    except Exception:  # noqa: BLE001 - a broken RETRY_BACKOFF is reported by the processor
        return 0.0


def _send(signal: Any, result: TaskResult) -> None:
    # As Django's backends do, the sender is the class of the result's backend.
    try:
        sender = type(task_backends[result.backend])
    except Exception as exc:  # noqa: BLE001 - an alias gone from TASKS sends nothing
        log.error("task %s: backend %r not loadable: %s", result.id, result.backend, describe(exc))
        return
    for receiver, response in signal.send_robust(sender=sender, task_result=result):
        if isinstance(response, Exception):
            log.error(
                "task %s: signal receiver %r raised %s",
                result.id,
                receiver,
                describe(response),
            )


def _set(result: TaskResult, **values: Any) -> None:
    for name, value in values.items():
        object.__setattr__(result, name, value)


def run(job: dict[str, Any], proceed: Callable[[], Any]) -> Any:
    # The task the processor resolved for this run (resolved again only outside a run).
    task = getattr(jobs.current_runner(), "task", None)
    if task is None:
        task, _why = resolve.for_job(job)
    if task is None:  # the processor resolved it a moment ago; nothing to record here
        return proceed()
    worker_id = worker_setup.worker_id()
    token = secrets.token_hex(8)
    started = time.time()
    data = store.start(job, token=token, worker_id=worker_id, at=started)
    if data is None:  # not recorded: say what we know (attempts counted from the payload)
        data = {
            "status": store.RUNNING,
            "started_at": store.iso(started),
            "last_attempted_at": store.iso(started),
            "worker_ids": json.dumps([worker_id] * (int(job.get("retry_count") or 0) + 1)),
        }
        result = result_from_payload(task, job, **data)
    else:
        result = results.build(task, job["jid"], data)
    bound = _result.set(result)
    end: dict[str, Any] = {"job": job, "token": token, "worker_id": worker_id, "started": started}
    try:
        _send(task_started, result)
        try:
            value = proceed()
        except middleware.Reschedule:
            store.finish(**end, status=store.READY)
            _set(result, status=TaskResultStatus.READY)
            raise
        except BaseException as exc:  # noqa: BLE001 - the processor files every failure
            if not locks.run_abandoned():  # (settled without it: its result too)
                _failed(result, end, exc)
            raise
    finally:
        _result.reset(bound)
    if locks.run_abandoned():
        # Back from a job the worker abandoned (a timeout's grace, or the shutdown
        # hand-over): the job was settled without this run; its result is not ours.
        return value
    finished = time.time()
    store.finish(
        **end, status=store.SUCCESSFUL, finished=finished, return_json=_json(value, result)
    )
    _set(
        result,
        status=TaskResultStatus.SUCCESSFUL,
        finished_at=store.from_epoch(finished),
        _return_value=value,
    )
    _send(task_finished, result)
    return value


def _json(value: Any, result: TaskResult) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        # Only a server middleware that replaced the task's (normalised) value gets here.
        log.error("task %s: return value not JSON-serialisable; stored as null", result.id)
        return "null"


def _failed(result: TaskResult, end: dict[str, Any], exc: BaseException) -> None:
    job = end["job"]
    terminal = unique.is_last_attempt(job)  # retry_count is counted after us, by the processor
    error = results.error_of(exc)
    finished = time.time() if terminal else None
    store.finish(
        **end,
        status=store.FAILED if terminal else store.READY,
        finished=finished,
        error=error,
        extra_ttl=0.0 if terminal else _retry_grace(job),
    )
    result.errors.append(TaskError(**error))
    _set(result, status=TaskResultStatus.FAILED if terminal else TaskResultStatus.READY)
    if finished is not None:
        _set(result, finished_at=store.from_epoch(finished))
    _send(task_finished, result)


def _failed_without_run(job: dict[str, Any], token: str, error_class: str, text: str) -> None:
    """A FAILED result for a task that ends without a run of its own."""
    store.finish(
        job,
        token=token,
        worker_id="",
        started=None,
        status=store.FAILED,
        finished=time.time(),
        error={
            "exception_class_path": error_class,
            "traceback": f"{error_class.rsplit('.', 1)[-1]}: {text}\n",
        },
    )


def unrunnable(job: dict[str, Any], why: str) -> None:
    """The processor files this task in dead without running it: say so in its result."""
    _failed_without_run(
        job,
        f"unrunnable:{job.get('retry_count') or 0}",
        "cogworker_django.jobs.NotRegistered",
        f"{job.get('func')!r} was not run: {why}",
    )


def departed(job: dict[str, Any], reason: str) -> None:
    """A task leaving the system without a run that settles it (sent to dead after too
    many orphanings, deleted, killed or cleared by an operator; departures.py): its
    result becomes FAILED with the reason, unless it had already ended."""
    task_id = job.get("jid")
    if job.get("kind") != "task" or not isinstance(task_id, str):
        return
    if store.read(task_id).get("status") in (store.SUCCESSFUL, store.FAILED):
        return
    _failed_without_run(
        job,
        f"departed:{job.get('retry_count') or 0}:{job.get('orphan_count') or 0}",
        "cogworker_django.departures.JobLeft",
        reason,
    )
