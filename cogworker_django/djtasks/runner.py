"""The ``"task"`` payload kind: how a worker runs a django.tasks task.

:func:`resolver` is registered with ``jobs.register_kind`` when the backend module is
imported. It returns a zero-argument callable only for a task that ``resolve.for_job``
accepts. Otherwise it returns None: the processor files the job in dead as "not a
registered job" and calls nothing; in a worker the result is marked FAILED with the
reason too, since that path never reaches the server middleware.

The callable runs the function with ``Task.call`` (an ``async def`` task runs to
completion in an event loop of its own, as with Django's ImmediateBackend; a worker
awaits it on the process's event loop instead, through ``arun``), passing a
``TaskContext`` first to a ``takes_context`` task, and returns the value normalised to
JSON as Django does. A value that can't be fails the task with a clear TypeError and
*no retry*: the function has run, and running it again would repeat its effects only
to fail the same way.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from django.tasks import Task, TaskContext
from django.utils.json import normalize_json

from . import lifecycle, resolve, worker_setup


def resolver(job: dict[str, Any]) -> Callable[[], Any] | None:
    task, why = resolve.for_job(job)
    if task is None:
        if worker_setup.in_worker():
            lifecycle.unrunnable(job, why)
        return None
    runner = functools.partial(run, task, job)
    runner.task = task  # type: ignore[attr-defined]  # read by lifecycle.run (no re-resolve)
    if inspect.iscoroutinefunction(task.func):
        # What the worker's event loop awaits instead (worker/aio_run.py).
        runner.arun = functools.partial(arun, task, job)  # type: ignore[attr-defined]
    return runner


def is_async(job: dict[str, Any]) -> bool:
    """Whether a ``"task"`` payload names an ``async def`` task (one the worker's event
    loop runs); no side effect for one that names nothing runnable."""
    task, _why = resolve.for_job(job)
    return task is not None and inspect.iscoroutinefunction(task.func)


def run(task: Task, job: dict[str, Any]) -> Any:
    args, kwargs = job.get("args") or [], job.get("kwargs") or {}
    if task.takes_context:
        result = lifecycle.current() or lifecycle.result_from_payload(task, job)
        value = task.call(TaskContext(task_result=result), *args, **kwargs)
    else:
        value = task.call(*args, **kwargs)
    return _normalised(task, job, value)


async def arun(task: Task, job: dict[str, Any]) -> Any:
    """:func:`run` for an ``async def`` task, awaited on the worker's event loop."""
    args, kwargs = job.get("args") or [], job.get("kwargs") or {}
    if task.takes_context:
        result = lifecycle.current() or lifecycle.result_from_payload(task, job)
        value = await task.func(TaskContext(task_result=result), *args, **kwargs)
    else:
        value = await task.func(*args, **kwargs)
    return _normalised(task, job, value)


def _normalised(task: Task, job: dict[str, Any], value: Any) -> Any:
    try:
        return normalize_json(value)
    except (TypeError, ValueError) as exc:
        job["retry"] = False  # see the module docstring: no retry for this failure
        raise TypeError(
            f"{task.module_path} returned a {type(value).__name__}, which is not "
            f"JSON-serialisable ({exc}); a task must return plain data (None, booleans, "
            "numbers, strings, lists, dicts)"
        ) from None
