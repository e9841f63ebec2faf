"""Which ``module_path`` may become a task: in a worker, and in ``get_result``.

A payload is data that anyone who can write to Redis can forge, so naming a callable
must never be a way to call it, nor to import (that is, execute) a module. A path
resolves only when all of these hold:

1. its module is already imported (``sys.modules``), or it is an installed app's tasks
   module (``<app>.tasks`` or ``<app>.tasks.<name>``, where Django's documentation puts
   tasks), imported on first use. A worker imports those at start (worker_setup), so in
   a worker this is in practice "already imported"; the lazy import serves processes
   that call ``get_result`` for a task they never imported. ``import_string`` is not used:
   it would import any module named.
2. the module's own attribute, read from its ``__dict__`` (a module ``__getattr__``
   never runs), is a ``django.tasks.Task`` whose ``module_path`` is exactly this path;
3. the backend alias the task was declared with (``@task(backend=...)``) and the one
   it was enqueued with (the payload's) are both configured with a ``CogworkerBackend``.
   A task declared for another backend never runs here, whatever a payload says (the
   backend's ``validate_task`` refuses to enqueue one re-routed with ``.using()``).

Anything else is refused with a reason: the worker files the job in dead as "not a
registered job" and calls nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import sys
from typing import Any

from django.apps import apps
from django.tasks import Task, task_backends

from ..store.errors import describe
from . import store


def is_app_tasks_module(module_name: str) -> bool:
    for config in apps.get_app_configs():
        root = f"{config.name}.tasks"
        if module_name == root or module_name.startswith(root + "."):
            return True
    return False


def _module(module_name: str) -> tuple[Any, str]:
    module = sys.modules.get(module_name)
    if module is not None:
        return module, ""
    if not is_app_tasks_module(module_name):
        return None, (
            f"module {module_name!r} is not imported and is not an installed app's tasks "
            "module, so it is not imported here"
        )
    try:
        return importlib.import_module(module_name), ""
    except Exception as exc:  # noqa: BLE001 - the reason goes to the dead set and the result
        return None, f"module {module_name!r} failed to import: {describe(exc)}"


def find(path: Any, alias: Any = None) -> tuple[Task | None, str]:
    """(the Task at ``path`` routed to a CogworkerBackend, "") or (None, why not)."""
    if not isinstance(path, str) or "." not in path:
        return None, f"{path!r} is not a dotted path"
    module_name, _, attr = path.rpartition(".")
    module, why = _module(module_name)
    if module is None:
        return None, why
    obj = vars(module).get(attr)
    if not isinstance(obj, Task):
        return None, f"{path!r} is not a django.tasks Task"
    if obj.module_path != path:
        return None, f"{path!r} is an alias of the task {obj.module_path!r}"
    enqueued_with = alias if isinstance(alias, str) and alias else obj.backend
    for name in dict.fromkeys((obj.backend, enqueued_with)):
        why = _not_ours(name)
        if why:
            return None, why
    return obj, ""


def is_ours(backend: Any) -> bool:
    """True for a CogworkerBackend (marked by a class attribute, so this module needs no
    import of backend.py, which imports it)."""
    return getattr(type(backend), "is_cogworker_backend", False) is True


def _not_ours(alias: str) -> str:
    try:
        backend = task_backends[alias]
    except Exception as exc:  # noqa: BLE001 - an unknown or broken alias refuses the task
        return f"task backend {alias!r} is not usable here: {describe(exc)}"
    if not is_ours(backend):
        return f"task backend {alias!r} is not a CogworkerBackend"
    return ""


def declared(task: Task) -> Task | None:
    """The task as its module declares it (the ``@task`` object), if that is a Task."""
    module = sys.modules.get(task.func.__module__)
    obj = vars(module).get(task.func.__qualname__) if module is not None else None
    return obj if isinstance(obj, Task) and obj.func is task.func else None


def with_options(task: Task, *, alias: Any, queue: Any, priority: Any, run_after: Any) -> Task:
    """``task`` as it was enqueued (``task.using(...)``); the task itself when these
    options are no longer valid here (settings changed since the enqueue)."""
    changes: dict[str, Any] = {}
    if isinstance(alias, str) and alias:
        changes["backend"] = alias
    if isinstance(queue, str) and queue:
        changes["queue_name"] = queue
    if isinstance(priority, int) and not isinstance(priority, bool):
        changes["priority"] = priority
    if isinstance(run_after, str) and run_after:
        try:
            changes["run_after"] = _datetime(run_after)
        except ValueError:
            pass
    if not changes:
        return task
    try:
        return dataclasses.replace(task, **changes)
    except Exception:  # noqa: BLE001 - validation against today's settings: keep the task
        return task


def _datetime(text: str) -> dt.datetime:
    value = store.from_iso(text)
    if value is None:
        raise ValueError(text)
    return value


def for_job(job: dict[str, Any]) -> tuple[Task | None, str]:
    """The task a ``"task"`` payload names, with its enqueue options, or (None, why)."""
    task, why = find(job.get("func"), job.get("backend"))
    if task is None:
        return None, why
    return (
        with_options(
            task,
            alias=job.get("backend"),
            queue=job.get("queue"),
            priority=job.get("priority"),
            run_after=job.get("run_after"),
        ),
        "",
    )
