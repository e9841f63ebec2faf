"""Stored results (store.py) as Django's ``TaskResult`` objects, and errors as stored."""

from __future__ import annotations

import json
import traceback as tb
from typing import Any

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist

from ..core import tracebacks
from ..store import connection, keys
from ..store.errors import safe_str
from . import resolve, store
from .store import from_iso


def error_of(exc: BaseException) -> dict[str, str]:
    """A failure as Django's ``TaskError`` fields; never raises (rule 7)."""
    try:
        cls = type(exc)
        path = f"{cls.__module__}.{cls.__qualname__}"
    except BaseException:  # noqa: BLE001
        path = "builtins.BaseException"
    try:
        text = "".join(tb.format_exception(exc))
    except BaseException:  # noqa: BLE001 - a traceback that can't be formatted
        text = f"{path}: {safe_str(exc)}\n"
    # Keep the end: the exception line is what a reader (and Django's tests) look for.
    return {"exception_class_path": path, "traceback": text[-tracebacks.TRACEBACK_LIMIT :]}


def _list(text: str | None) -> list[Any]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _dict(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _int(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def build(task: Task, task_id: str, data: dict[str, str]) -> TaskResult:
    """The ``TaskResult`` of the stored fields ``data``."""
    try:
        status = TaskResultStatus(data.get("status") or store.READY)
    except ValueError:
        status = TaskResultStatus.READY
    errors = [
        TaskError(
            exception_class_path=str(e.get("exception_class_path", "")),
            traceback=str(e.get("traceback", "")),
        )
        for e in _list(data.get("errors"))
        if isinstance(e, dict)
    ]
    result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=task_id,
        status=status,
        enqueued_at=from_iso(data.get("enqueued_at")),
        started_at=from_iso(data.get("started_at")),
        finished_at=from_iso(data.get("finished_at")),
        last_attempted_at=from_iso(data.get("last_attempted_at")),
        args=_list(data.get("args")),
        kwargs=_dict(data.get("kwargs")),
        backend=data.get("backend") or task.backend,
        errors=errors,
        worker_ids=[str(w) for w in _list(data.get("worker_ids"))],
    )
    if "return_value" in data:
        try:
            value = json.loads(data["return_value"])
        except ValueError:  # written by hand, or damaged: the rest of the result still reads
            value = None
        object.__setattr__(result, "_return_value", value)
    return result


def load(task_id: str) -> TaskResult:
    """The stored result of ``task_id``; TaskResultDoesNotExist if there is none (never
    enqueued, or expired after RESULT_TTL) or its task can't be loaded here."""
    data = store.read(task_id) if isinstance(task_id, str) and task_id else {}
    if not data.get("task"):
        raise TaskResultDoesNotExist(task_id)
    task, why = resolve.find(data["task"], data.get("backend"))
    if task is None:
        raise TaskResultDoesNotExist(f"{task_id}: its task can't be loaded here: {why}")
    task = resolve.with_options(
        task,
        alias=data.get("backend"),
        queue=data.get("queue"),
        priority=_int(data.get("priority")),
        run_after=data.get("run_after"),
    )
    return build(task, task_id, _as_read_now(data))


def _as_read_now(data: dict[str, str]) -> dict[str, str]:
    """``data`` with RUNNING read as READY when the worker that started the last run is
    gone (stopped, or dead: its presence key has expired): the run was handed back to its
    queue at TERM, or waits for orphan recovery, and no worker runs it until one takes
    it (then RUNNING again, with that worker's id appended)."""
    if data.get("status") != store.RUNNING:
        return data
    runners = _list(data.get("worker_ids"))
    if not runners:
        return data
    try:
        alive = connection.get_client().exists(keys.process(str(runners[-1])))
    except Exception:  # noqa: BLE001 - unknown: the stored status stands
        return data
    return data if alive else {**data, "status": store.READY}
