"""``P:result:<id>``: the stored result of one django.tasks task (lua/task_result.lua).

Fields, all text: ``task`` (module path), ``backend`` (alias), ``queue``, ``priority``,
``run_after``, ``args`` / ``kwargs`` (JSON), ``status``, ``enqueued_at``,
``started_at``, ``finished_at``, ``last_attempted_at`` (ISO 8601, UTC; absent = None),
``errors`` (JSON list of ``{"exception_class_path", "traceback"}``), ``worker_ids``
(JSON list, one entry per run), ``return_value`` (JSON, after a success), and the
script's own ``run_token`` / ``end_token``. Every write sets the TTL (``RESULT_TTL``,
longer while the task waits for its ``run_after`` or a retry).

Three writes, each one script call that also rebuilds the base fields from the payload
when the hash is missing (it expired, or an earlier write failed):

- *create*, by the enqueuer right after the push and only if no worker wrote first. Rule
  1: the push is the write that matters; this one is reported, never raised.
- *start*, by the worker before the run: best-effort (rule 4); an *end* without a
  *start* counts the run itself.
- *end*: what ``get_result`` must show, so it is tried a few times and, if Redis is still
  away, kept in memory and retried on every heartbeat (like deferred lock releases). It
  is idempotent (the run's token), so a retry never appends an error twice.

Nothing here imports ``django.tasks``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from typing import Any

from django.conf import settings
from django.utils import timezone

from .. import conf
from ..core import priority
from ..store import connection, errors, keys, runtime, scripts
from ..store.deferred import Deferred

log = logging.getLogger("cogworker_django")

READY, RUNNING, FAILED, SUCCESSFUL = "READY", "RUNNING", "FAILED", "SUCCESSFUL"
COMPONENT = "Task results"
# Pauses between the quick tries of an end write before it is deferred to the heartbeat:
# a blip (a failover, a restart) is usually over within them.
END_RETRY_PAUSES = (0.1, 0.4)


def iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


def from_iso(text: str | None) -> dt.datetime | None:
    """A stored timestamp as Django hands out datetimes: aware (UTC) with ``USE_TZ``,
    naive in the current time zone without."""
    if not text:
        return None
    value = dt.datetime.fromisoformat(text)
    if not settings.USE_TZ:
        value = timezone.make_naive(value)
    return value


def from_epoch(epoch: float) -> dt.datetime:
    value = from_iso(iso(epoch))
    assert value is not None
    return value


def base_fields(job: dict[str, Any]) -> dict[str, str]:
    """What the payload alone says about the result (enough to rebuild it)."""
    fields = {
        "task": str(job.get("func")),
        "backend": str(job.get("backend") or "default"),
        "queue": str(job.get("queue")),
        "priority": str(priority.of(job)),
        # ensure_ascii (the default): any text, even with lone surrogates, can be sent.
        "args": json.dumps(job.get("args") or []),
        "kwargs": json.dumps(job.get("kwargs") or {}),
        "status": READY,
        "enqueued_at": iso(_float(job.get("created_at"), time.time())),
        "errors": "[]",
        "worker_ids": "[]",
    }
    if isinstance(job.get("run_after"), str):
        fields["run_after"] = job["run_after"]
    return fields


def _float(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def ttl(extra: float = 0.0) -> int:
    return int(conf.get().RESULT_TTL + max(0.0, extra) + 0.999)


def _args(
    mode: str,
    job: dict[str, Any],
    *,
    ttl_seconds: int,
    token: str = "",
    worker_id: str = "",
    error: dict[str, str] | None = None,
    first_start: float | None = None,
    updates: dict[str, str] | None = None,
) -> list[Any]:
    base = base_fields(job)
    if first_start is not None:
        base["started_at"] = iso(first_start)  # the first run's start: only where absent
    args: list[Any] = [
        mode,
        ttl_seconds,
        token,
        json.dumps(worker_id) if worker_id else "",
        json.dumps(error) if error else "",
        len(base),
    ]
    for pair in (*base.items(), *(updates or {}).items()):
        args.extend(pair)
    return args


def _call(args: list[Any], task_id: str, conn: Any = None) -> Any:
    return scripts.run(
        "task_result",
        conn or connection.get_client(),
        [keys.result(task_id), keys.result_ended(task_id)],
        args,
    )


def decode_hash(flat: Any) -> dict[str, str]:
    """A HGETALL reply (a dict, or the flat list a script returns) as text."""
    if isinstance(flat, dict):
        items = list(flat.items())
    else:
        items = list(zip(flat[0::2], flat[1::2], strict=True))
    return {connection.text(k): connection.text(v) for k, v in items}


# The three writes --------------------------------------------------------------------------


def create(job: dict[str, Any], *, extra_ttl: float = 0.0) -> bool:
    """The READY result, right after the push; reported (never raised) when it fails."""
    try:
        _call(_args("create", job, ttl_seconds=ttl(extra_ttl)), job["jid"])
    except Exception as exc:  # noqa: BLE001 - rule 1: the push went through; this is secondary
        errors.report(COMPONENT, exc, f"result of task {job.get('jid')} not created")
        return False
    errors.recovered(COMPONENT)
    return True


def start(job: dict[str, Any], *, token: str, worker_id: str, at: float) -> dict[str, str] | None:
    """Mark the run started (RUNNING, worker id appended); the hash after the write, or
    None when it failed (best-effort, rule 4)."""
    updates = {"status": RUNNING, "last_attempted_at": iso(at)}
    args = _args(
        "start",
        job,
        ttl_seconds=ttl(),
        token=token,
        worker_id=worker_id,
        first_start=at,
        updates=updates,
    )
    try:
        reply = _call(args, job["jid"])
    except Exception as exc:  # noqa: BLE001
        errors.report(COMPONENT, exc, f"start of task {job.get('jid')} not recorded")
        return None
    errors.recovered(COMPONENT)
    return decode_hash(reply) if reply else None


def finish(
    job: dict[str, Any],
    *,
    token: str,
    worker_id: str,
    started: float | None,
    status: str,
    finished: float | None = None,
    error: dict[str, str] | None = None,
    return_json: str | None = None,
    extra_ttl: float = 0.0,
) -> bool:
    """Record how the run ended (``started`` None: it never started). Tried a few
    times, then deferred to the heartbeat (never raised: rule 4). True when written now."""
    updates = {"status": status}
    if started is not None:
        updates["last_attempted_at"] = iso(started)
    if finished is not None:
        updates["finished_at"] = iso(finished)
    if return_json is not None:
        updates["return_value"] = return_json
    args = _args(
        "end",
        job,
        ttl_seconds=ttl(extra_ttl),
        token=token,
        worker_id=worker_id,
        error=error,
        first_start=started,
        updates=updates,
    )
    task_id = job["jid"]
    for pause in (*END_RETRY_PAUSES, None):
        try:
            _call(args, task_id)
        except Exception as exc:  # noqa: BLE001
            if not errors.is_unavailable(exc):
                log.error("result of task %s not written: %s", task_id, errors.describe(exc))
                return False
            if pause is None:
                errors.report(COMPONENT, exc, f"end of task {task_id} kept to write later")
                pending().add((task_id, token), args)
                return False
            time.sleep(pause)
            continue
        errors.recovered(COMPONENT)
        return True
    return False


def read(task_id: str) -> dict[str, str]:
    """The stored fields of ``task_id`` ({} when there is no such result)."""
    return decode_hash(connection.get_client().hgetall(keys.result(task_id)))


# End writes waiting for Redis ----------------------------------------------------------------


class PendingWrites(Deferred[tuple[str, str], list[Any]]):
    """End writes that could not be made while Redis was away ((task id, run token) ->
    the script's arguments), retried on every beat. In this process's memory only: one
    still pending when the process exits is lost (the task's job itself is settled or
    handed over as usual)."""

    def __init__(self) -> None:
        super().__init__("result of task")


def pending() -> PendingWrites:
    """This process's pending end writes (its runtime's: store/runtime.py)."""
    return runtime.current().of(PendingWrites)


def retry_pending(conn: Any = None) -> None:
    """On every heartbeat (the worker's django.tasks plugin): retry deferred end writes."""
    writes = pending()
    if writes.pending():
        if writes.retry_all(lambda key, args: _call(args, key[0], conn)):
            log.info("deferred task results written")
