"""A job's outcome, return value and progress, kept in Redis for its ``result_ttl``:
what :class:`~cogworker_django.core.jobref.JobRef` reads.

One hash per job, ``P:result:<jid>`` (``keys.result``): the same key the django.tasks
backend keeps a task's result in (djtasks/store.py, with fields of its own), so that one
reader serves both. A ``@job``'s fields, all text:

- ``status``: ``succeeded``, ``dead``, ``cancelled``, ``expired``, ``discarded`` (the
  run ended), or ``retrying`` (it failed and waits for its retry);
- ``value``: the return value of a succeeded run, as JSON in the tagged form of
  arguments (core/argcodec.py); ``unkept``: instead of it, why it could not be kept;
- ``error``: JSON ``{"class", "message", "traceback"}`` of a run that did not succeed;
- ``ended_at``: epoch seconds;
- ``progress``: JSON ``{"done", "total", "message", "at"}``, written while it runs;
- ``waiting``: how many callers of ``result()`` registered to be woken.

Written in the round trip that settles the run, never one of its own: with the ack in
lua/fetch.lua, with the filing in lua/settle.lua (lua/include/keep_result.lua in both).
A ``result_ttl`` of 0 keeps nothing. A caller of ``result()`` blocks on a list of its
own, ``P:ended:<jid>`` (``keys.result_ended``), which the end's write pushes to only when
a caller registered (lua/result_wait.lua): the hot path writes one hash and nothing else.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from .. import conf
from ..store import connection, errors, keys, runtime, scripts
from ..store.codec import number, reply_text
from ..store.errors import CogworkerError
from . import payload

log = logging.getLogger("cogworker_django")

ENDED = frozenset(("succeeded", "dead", "cancelled", "expired", "discarded"))
STATUSES = (
    "queued",
    "scheduled",
    "running",
    "retrying",
    *sorted(ENDED),
)
# A django.tasks result's status, as a job's (djtasks/store.py).
TASK_STATUSES = {
    "READY": "queued",
    "RUNNING": "running",
    "SUCCESSFUL": "succeeded",
    "FAILED": "dead",
}
# A blocked result() call waits in slices no longer than a blocking fetch (rule 11: the
# settings keep every socket timeout above it), registering again before each.
WAIT_SLICE = conf.FETCH_BLOCK_SECONDS


class JobFailed(CogworkerError):
    """``JobRef.result()`` of a job that did not succeed (dead, cancelled, expired,
    discarded), or whose return value could not be kept. ``status`` says which;
    ``error_class``, ``message`` and ``traceback`` are the run's error as filed."""

    def __init__(
        self, jid: str, status: str, error_class: str, message: str, traceback: str = ""
    ) -> None:
        self.jid, self.status = jid, status
        self.error_class, self.message, self.traceback = error_class, message, traceback
        super().__init__(f"job {jid} {status}: {error_class}: {message}")


@dataclass(frozen=True, slots=True)
class Ended:
    """A run's outcome to keep, written with its settlement (lua/include/keep_result.lua):
    ``fields`` (field, value, ...) on ``P:result:<jid>`` for ``ttl`` seconds (0: delete
    what its progress wrote); ``terminal``: the run ended, waiting callers are woken."""

    jid: str
    ttl: int
    terminal: bool
    fields: tuple[str, ...]

    def keys(self) -> list[str]:
        return [keys.result(self.jid), keys.result_ended(self.jid)]

    def args(self) -> list[Any]:
        return [self.ttl, "1" if self.terminal else "", len(self.fields) // 2, *self.fields]


def ttl_of(job: dict[str, Any]) -> int:
    """How long ``job``'s result is kept: its ``result_ttl`` (``@job(result_ttl=)``,
    carried in the payload), else ``COGWORKER["JOB_RESULT_TTL"]``."""
    value = job.get("result_ttl")
    if value is not None:
        seconds = number(value)
        if seconds is not None and seconds >= 0:
            return math.ceil(seconds)
    return conf.get().JOB_RESULT_TTL


def value_text(value: Any) -> str:
    """A return value as it is kept: JSON, with the argument types' tagged forms; raises
    TypeError or ValueError saying why it can't be kept (or PayloadTooLarge)."""
    from . import argcodec

    text = argcodec.dumps(value)
    limit = payload.max_payload_bytes()
    if len(text) > limit // 4 and len(text.encode("utf-8", "surrogatepass")) > limit:
        raise payload.PayloadTooLarge("the return value", len(text.encode()), limit)
    return text


def ended(
    job: dict[str, Any],
    status: str,
    *,
    value: Any = None,
    error: tuple[str, str, str] | None = None,
    now: float | None = None,
) -> Ended | None:
    """What to keep of a run of ``job`` that ended in ``status`` (or is ``retrying``):
    None when nothing is kept (a django.tasks task keeps its own result; an unparseable
    payload has no jid of its own). ``error``: (class, message, traceback)."""
    jid = job.get("jid")
    if job.get("kind") or not isinstance(jid, str) or job.get("func") == payload.UNPARSEABLE:
        return None
    progress = job.unsent_progress() if hasattr(job, "unsent_progress") else None
    ttl = ttl_of(job)
    if ttl <= 0:
        # Nothing kept; a progress written during the run goes with the run.
        return Ended(jid, 0, True, ()) if getattr(job, "wrote_progress", False) else None
    fields = ["status", status, "ended_at", repr(time.time() if now is None else now)]
    if status == "succeeded":
        try:
            fields += ["value", value_text(value)]
        except Exception as exc:  # noqa: BLE001 - the run succeeded: only its value is lost
            why = f"its return value ({type(value).__name__}) was not kept: {errors.safe_str(exc, 500)}"
            log.warning("%s (jid %s): %s", job.get("func"), jid, why)
            fields += ["unkept", why]
    elif error is not None:
        cls, message, trace = error
        fields += ["error", json.dumps({"class": cls, "message": message, "traceback": trace})]
    if progress is not None:
        fields += ["progress", progress]
    return Ended(jid, ttl, status in ENDED, tuple(fields))


def error_of(job: dict[str, Any]) -> tuple[str, str, str]:
    """The error a failed run left in its payload (worker/failures.record_error)."""
    return (
        errors.safe_str(job.get("error_class") or "Error"),
        errors.safe_str(job.get("error_message") or ""),
        errors.safe_str(job.get("traceback") or ""),
    )


def keep(conn: Any, ends: list[Ended]) -> None:
    """Write ``ends`` in one round trip of their own (lua/result_end.lua)."""
    if not ends:
        return
    args: list[Any] = []
    for end in ends:
        args += end.args()
    scripts.run("result_end", conn, [k for end in ends for k in end.keys()], args)


def writes_to_redis() -> bool:
    """Whether a run's progress goes to Redis: not in the test modes (fake, inline),
    where a job runs with no worker and maybe no Redis; the report is kept on the job."""
    from . import client

    try:
        return client.active_sink() is None
    except Exception:  # noqa: BLE001 - a broken mode is said by the push; not here
        return False


# Reading -------------------------------------------------------------------------------


def read(jid: str, conn: Any = None) -> dict[str, str]:
    """The kept fields of ``jid`` ({} when nothing is kept); in the test modes (fake,
    inline), what the runs of their jobs kept in memory (core/recording.py)."""
    if conn is None and not writes_to_redis():
        with _local_lock:
            return dict(_kept().outcomes.get(jid, {}))
    conn = conn or connection.get_client()
    return _text_hash(conn.hgetall(keys.result(jid)))


def _text_hash(flat: Any) -> dict[str, str]:
    if isinstance(flat, dict):
        items = list(flat.items())
    else:
        items = list(zip(flat[0::2], flat[1::2], strict=True))
    return {reply_text(k): reply_text(v) for k, v in items}


def status_of(fields: dict[str, str]) -> str | None:
    """The status a kept hash says (a django.tasks result's too), or None."""
    status = fields.get("status")
    if not status:
        return None
    if "task" in fields:
        return TASK_STATUSES.get(status, status.lower())
    return status


def has_ended(fields: dict[str, str]) -> bool:
    return status_of(fields) in ENDED


def wait_ended(jid: str, timeout: float | None) -> dict[str, str] | None:
    """Block until ``jid``'s run has ended (its kept fields), or None after ``timeout``
    seconds (None: no limit). A blocking call on Redis, not a sleep loop: the end's write
    wakes it (lua/include/keep_result.lua)."""
    if not writes_to_redis():  # the test modes: a run ends inside its enqueue or drain
        fields = read(jid)
        return fields if has_ended(fields) else None
    conn = connection.get_client()
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    wait = scripts.get("result_wait")
    while True:
        left = WAIT_SLICE if deadline is None else deadline - time.monotonic()
        slice_ = min(WAIT_SLICE, left)
        reply = wait(conn, [keys.result(jid)], [math.ceil(slice_) + 60])
        if reply:
            return _text_hash(reply)
        if slice_ <= 0:
            return None
        # Moved back where it was: every blocked caller is served, and a late one finds it
        # (BRPOPLPUSH, not BLMOVE: basic fetch serves Redis older than 6.2).
        ended = keys.result_ended(jid)
        try:
            conn.brpoplpush(ended, ended, max(0.01, slice_))
        except redis.ResponseError as exc:
            if "timeout" not in errors.safe_str(exc):
                raise
            conn.brpoplpush(ended, ended, max(1, math.ceil(slice_)))  # Redis < 6.0: seconds
        fields = read(jid, conn)
        if has_ended(fields):
            return fields


def outcome(jid: str, fields: dict[str, str]) -> Any:
    """The return value an ended run kept, or :class:`JobFailed`."""
    from . import argcodec

    status = status_of(fields) or "unknown"
    if "task" in fields:  # a django.tasks result
        if status == "succeeded":
            return json.loads(fields.get("return_value") or "null")
        failures = _json(fields.get("errors"), [])
        last = failures[-1] if failures else {}
        raise JobFailed(
            jid,
            status,
            errors.safe_str(last.get("exception_class_path", "Error")),
            "",
            errors.safe_str(last.get("traceback", "")),
        )
    if status == "succeeded":
        if "value" in fields:
            return argcodec.loads(fields["value"])
        raise JobFailed(jid, status, "ResultNotKept", fields.get("unkept", "no value kept"))
    error = _json(fields.get("error"), {})
    raise JobFailed(
        jid,
        status,
        errors.safe_str(error.get("class", "Error")),
        errors.safe_str(error.get("message", "")),
        errors.safe_str(error.get("traceback", "")),
    )


def progress_of(fields: dict[str, str]) -> dict[str, Any] | None:
    value = _json(fields.get("progress"), None)
    return value if isinstance(value, dict) else None


def _json(text: str | None, default: Any) -> Any:
    if not text:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


# Where a job is when nothing is kept of it yet (queued, scheduled, running, retrying):
# installed by the read layer (api/find.py), which searches the queues and sets.
# (Registered for the process's life: store/runtime.registered.)
class _Locator:
    locate: Callable[[str], str | None] | None = None


def install_locator(locate: Callable[[str], str | None]) -> None:
    runtime.registered(_Locator).locate = locate


def locate(jid: str) -> str | None:
    """Where ``jid`` is when it has not ended; in the test modes, whether it is recorded."""
    if not writes_to_redis():
        with _local_lock:
            return _kept().places.get(jid)
    found = runtime.registered(_Locator).locate
    return found(jid) if found is not None else None


# The test modes (fake, inline) keep what a worker would keep in Redis here, in memory:
# each run's outcome, and where each recorded job waits (core/recording.py writes both).
class _Kept:
    """On the runtime (store/runtime.py): each run's outcome, where each job waits."""

    def __init__(self) -> None:
        self.outcomes: dict[str, dict[str, str]] = {}
        self.places: dict[str, str] = {}


def _kept() -> _Kept:
    return runtime.current().of(_Kept)


_local_lock = threading.Lock()


def keep_local(jid: str, fields: dict[str, str]) -> None:
    with _local_lock:
        kept = _kept()
        kept.outcomes[jid] = dict(fields)
        kept.places.pop(jid, None)


def place_local(jid: str, place: str | None) -> None:
    places = _kept().places
    with _local_lock:
        if place is None:
            places.pop(jid, None)
        else:
            places[jid] = place


def clear_local() -> None:
    with _local_lock:
        kept = _kept()
        kept.outcomes.clear()
        kept.places.clear()
