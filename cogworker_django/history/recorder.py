"""Run history, the recording side: every run recorded cheaply in this process's
memory, for history/writer.py to write to a capped Redis stream.

Duties:
- :class:`HistoryMiddleware` (outermost server middleware, so it times everything)
  records each run: jid, job, queue, status ("success", "failed", or the job
  controls' "timeout", "cancelled", "expired"), started_at, duration,
  wait (from enqueue to start), error_class, error_message, worker identity, periodic
  entry name;
- records go to this process's in-memory :data:`buffer` (a tuple each: the hot path
  does as little as it can), never one write per job (docs/internals.md);
  the worker's History chore writes them in batches to ``P:history``, one stream entry per
  run (field ``run``: the record as JSON) capped at ``HISTORY_MAX_RUNS`` (MAXLEN ~), by
  one script call per :data:`WRITE_CHUNK` runs, every :data:`FLUSH_INTERVAL` or sooner
  when :data:`FLUSH_BATCH` runs wait; the launcher flushes once more at shutdown;
- best-effort (rule 4): recording or writing never fails, slows or changes a job. While
  Redis is away the buffer keeps up to :data:`MAX_BUFFERED` runs; a deterministic error
  (the key holding the wrong type) drops that batch and backs off until the key guard
  has moved the key aside;
- reading (for the admin and the api) is in ``api/history.py``.

``COGWORKER["HISTORY"] = False`` (or ``HISTORY_MAX_RUNS = 0``) records nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .. import conf
from ..controls.errors import timeout_behind
from ..core import locks, payload
from ..core.middleware import Reschedule
from ..store import errors, runtime
from ..store.codec import CompactJSON, json_string
from ..store.errors import CogworkerError

log = logging.getLogger("cogworker_django")

COMPONENT = "History"
# How often the flusher writes, and how many waiting runs make it write at once.
FLUSH_INTERVAL = 1.0
FLUSH_BATCH = 500
# Runs per script call: enough to amortise the round trip, few enough that one call holds
# Redis (and this process's GIL, while encoding) for well under a millisecond.
WRITE_CHUNK = 100
# Runs kept in memory while Redis is away (a few MB); beyond that the oldest are dropped.
MAX_BUFFERED = 10_000
# Error text kept per run: the full text is in the dead/retry payload already.
ERROR_MESSAGE_LIMIT = 1000
# A deterministic write failure (WRONGTYPE) backs off this long, doubling to the cap;
# the key guard moves the key aside within KEYGUARD_INTERVAL (60 s).
BACKOFF_FIRST = 5.0
BACKOFF_MAX = 60.0

# A run as buffered: (jid, job, queue, status, started_at, duration, error_class,
# error_message, periodic, wait). The worker identity is added when it is written.
Run = tuple
# The record encoder: compact JSON, non-ASCII kept (json.JSONEncoder(separators=(",", ":"),
# ensure_ascii=False) text, byte for byte); api/history.py matches fields written by
# exactly this encoding.
dumps = CompactJSON()


def enabled() -> bool:
    s = conf.get()
    return s.HISTORY and s.HISTORY_MAX_RUNS > 0


class Buffer:
    """This process's runs not yet written, oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: deque[Run] = deque()
        self.dropped = 0
        # Called once FLUSH_BATCH runs wait: a worker's History plugin wakes its flush.
        self.on_full: Callable[[], Any] | None = None
        # Set at a worker's start (its History plugin, worker/plugins.py); a fallback for others.
        self.worker = f"{socket.gethostname().split('.')[0]}:{os.getpid()}"

    def add(self, run: Run) -> None:
        with self._lock:
            self._runs.append(run)
            if len(self._runs) > MAX_BUFFERED:
                self._runs.popleft()
                self.dropped += 1
            full = len(self._runs) == FLUSH_BATCH  # (once per batch, not once per run)
        on_full = self.on_full
        if full and on_full is not None:
            on_full()

    def take(self, n: int) -> list[Run]:
        with self._lock:
            return [self._runs.popleft() for _ in range(min(n, len(self._runs)))]

    def put_back(self, runs: list[Run]) -> None:
        """Return runs a failed write did not store, in front (they are the oldest)."""
        with self._lock:
            self._runs.extendleft(reversed(runs))
            while len(self._runs) > MAX_BUFFERED:
                self._runs.popleft()
                self.dropped += 1

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()
            self.dropped = 0


def current_buffer() -> Buffer:
    """This process's buffer: its runtime's (store/runtime.py)."""
    return runtime.current().of(Buffer)


def __getattr__(name: str) -> Any:
    if name == "buffer":  # history.buffer: the runtime's, as it was a module global
        return current_buffer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def capture(
    job: dict[str, Any],
    queue: str,
    started_at: float,
    duration: float,
    exc: BaseException | None,
) -> Run:
    """One run as buffered: only what the record needs (never the payload or the
    exception itself, which would keep arguments and tracebacks alive in memory)."""
    periodic = job.get("periodic")
    enqueued = job.get("enqueued_at")
    wait = None
    if (
        isinstance(enqueued, (int, float))
        and not isinstance(enqueued, bool)
        and enqueued == enqueued
    ):
        wait = max(0.0, started_at - enqueued)
    if exc is None:
        status, error_class, message = "success", None, None
    else:
        # Job controls' exceptions name their own status: timeout, cancelled, expired (a
        # finally that raised while a timeout unwound the job: the timeout's).
        exc = timeout_behind(exc)
        status = getattr(type(exc), "history_status", None) or "failed"
        error_class = payload.error_class(exc)
        message = errors.safe_str(exc, ERROR_MESSAGE_LIMIT)  # rule 7: never raises
    return (
        job.get("jid"),
        job.get("func"),
        queue,
        status,
        started_at,
        duration,
        error_class,
        message,
        periodic if isinstance(periodic, str) else None,
        wait,
    )


def as_dict(run: Run, worker: str) -> dict[str, Any]:
    """The record of a buffered run, as stored (JSON) and as :func:`query` returns it."""
    jid, job, queue, status, started_at, duration, error_class, error_message, periodic = run[:9]
    return {
        "jid": jid,
        "job": job,
        "queue": queue,
        "status": status,
        "started_at": started_at,
        "duration": duration,
        "wait": run[9] if len(run) > 9 else None,
        "error_class": error_class,
        "error_message": error_message,
        "worker": worker,
        "periodic": periodic,
    }


class _Unusual(CogworkerError):
    """A field record_text doesn't write itself (dumps does); never leaves this module."""


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is str:
        return json_string(value)
    raise _Unusual


def _number(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is float and value - value == 0.0:  # finite (not NaN, not infinite)
        return repr(value)  # what the encoder writes for a finite float
    raise _Unusual


def record_text(run: Run, worker: str) -> str:
    """``dumps(as_dict(run, worker))``, byte for byte (tests/history/test_history_encoder.py
    compares them), written from the run's fields without a dict: the flusher encodes
    every run, and that encoding was most of history's cost per job. A field of another
    type than the recorder writes (a hand-made payload's jid, say) goes through dumps."""
    try:
        jid, job, queue, status, started_at, duration, error_class, error_message, periodic = run[
            :9
        ]
        return "".join(
            (
                '{"jid":',
                _text(jid),
                ',"job":',
                _text(job),
                ',"queue":',
                _text(queue),
                ',"status":',
                _text(status),
                ',"started_at":',
                _number(started_at),
                ',"duration":',
                _number(duration),
                ',"wait":',
                _number(run[9] if len(run) > 9 else None),
                ',"error_class":',
                _text(error_class),
                ',"error_message":',
                _text(error_message),
                ',"worker":',
                _text(worker),
                ',"periodic":',
                _text(periodic),
                "}",
            )
        )
    except _Unusual:
        return dumps(as_dict(run, worker))


class HistoryMiddleware:
    """Server middleware timing every run; only the job's own exception ever leaves it."""

    def __init__(self) -> None:
        self.enabled = enabled()

    @property
    def active(self) -> bool:
        """False with history off: no run of this process passes through it (RunChain)."""
        return self.enabled

    def __call__(self, job: dict[str, Any], queue: str, run: Any) -> Any:
        if not self.enabled:
            return run()
        started_at = time.time()
        t0 = time.perf_counter()
        try:
            result = run()
        except Reschedule:
            raise  # not a run: the job goes back on the schedule without running
        except BaseException as exc:
            self._record(job, queue, started_at, time.perf_counter() - t0, exc)
            raise
        self._record(job, queue, started_at, time.perf_counter() - t0, None)
        return result

    async def acall(self, job: dict[str, Any], queue: str, run: Any) -> Any:
        """The same around an async run, on the worker's event loop (worker/aio_chain.py)."""
        if not self.enabled:
            return await run()
        started_at = time.time()
        t0 = time.perf_counter()
        try:
            result = await run()
        except Reschedule:
            raise
        except BaseException as exc:
            self._record(job, queue, started_at, time.perf_counter() - t0, exc)
            raise
        self._record(job, queue, started_at, time.perf_counter() - t0, None)
        return result

    @staticmethod
    def _record(job, queue, started_at, duration, exc) -> None:
        if locks.run_abandoned():
            # The run was abandoned (requeued at shutdown, or filed by the watchdog):
            # whoever settled it recorded it; a thread coming back later records nothing.
            return
        try:
            current_buffer().add(capture(job, queue, started_at, duration, exc))
        except Exception as err:  # noqa: BLE001 - rule 4: history never fails a job
            errors.report(COMPONENT, err, "a run was not recorded")
