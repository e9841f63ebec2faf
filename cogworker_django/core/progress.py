"""A running job's progress: ``current_job().progress(done, total, message)``, written
to the job's kept hash (core/results.py: field ``progress``) at most a few times a
second, the last report always (with the run's end, which reads it here).

A worker's run hands ``current_job()`` a :class:`RunningJob`: the job's payload dict
itself, with the progress methods. From an ``async def`` job the writes go on a thread
of the loop's executor, one at a time and in order, never on the loop every run shares.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from ..store import connection, errors, keys
from . import results

# The longest message a progress report keeps.
PROGRESS_MESSAGE_LIMIT = 500
# Progress is written at most this often per run (the last report always: with the
# run's end). A job may report every row of a million: the writes stay a few a second.
PROGRESS_INTERVAL = 0.25
# How long a running job's progress lasts at least (refreshed by each write): a job
# whose result_ttl is shorter than its run, or 0, still shows its progress while it runs.
PROGRESS_TTL = 3600


class RunningJob(dict):
    """The payload of the job running now, as ``current_job()`` gives it: still the job's
    dict (jid, queue, retry_count, ...), with :meth:`progress`."""

    # The run's progress: the last report, when it was written (monotonic), and whether
    # the last report is still unwritten (it then goes with the run's end).
    _progress: dict[str, Any] | None = None
    _written_at: float = -math.inf
    _dirty: bool = False
    _wrote: bool = False
    _inflight: Any = None  # an async run's write on a thread (one at a time, in order)

    @property
    def jid(self) -> str:
        return str(self.get("jid"))

    def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Report how far the job has come: ``done`` of ``total`` (or of an unknown
        total), with a short ``message``. Cheap to call in a loop: written at most a few
        times a second, and the last report always (with the run's end)."""
        self._progress = _checked_progress(done, total, message)
        now = time.monotonic()
        busy = self._inflight is not None and not self._inflight.done()
        if now - self._written_at < PROGRESS_INTERVAL or busy or not results.writes_to_redis():
            self._dirty = True  # written later, or with the run's end
            return
        self._written_at, self._dirty, self._wrote = now, False, True
        text = json.dumps(self._progress)
        ttl = max(results.ttl_of(self), PROGRESS_TTL)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            _write_progress(self.jid, text, ttl)
        else:  # an async job: never a round trip on the loop every run shares
            self._inflight = loop.run_in_executor(None, _write_progress, self.jid, text, ttl)

    async def progress_written(self) -> None:
        """(An async run, before it settles.) Wait for its progress write on a thread, so
        that it never lands after the last report, which goes with the run's end."""
        inflight = self._inflight
        if inflight is not None and not inflight.done():
            try:
                await asyncio.wait_for(asyncio.shield(inflight), connection.longest_call())
            except Exception:  # noqa: BLE001 - a write that never comes back is its own
                self._dirty = self._progress is not None

    @property
    def last_progress(self) -> dict[str, Any] | None:
        """The last progress reported by this run (written or not)."""
        return None if self._progress is None else dict(self._progress)

    @property
    def wrote_progress(self) -> bool:
        """Whether this run wrote progress to Redis (its end then deletes it when it keeps
        no result)."""
        return self._wrote

    def unsent_progress(self) -> str | None:
        """The last report, as JSON, when it was not written yet (it goes with the end)."""
        if self._dirty and self._progress is not None:
            return json.dumps(self._progress)
        return None


def _checked_progress(done: Any, total: Any, message: Any) -> dict[str, Any]:
    def amount(name: str, value: Any) -> float | int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"progress(): {name} must be a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"progress(): {name} must be a finite number >= 0, got {value!r}")
        return value

    report: dict[str, Any] = {"done": amount("done", done), "total": None}
    if total is not None:
        report["total"] = amount("total", total)
    if not isinstance(message, str):
        raise TypeError(f"progress(): message must be a str, got {type(message).__name__}")
    report["message"] = message[:PROGRESS_MESSAGE_LIMIT]
    report["at"] = time.time()
    return report


def _write_progress(jid: str, text: str, ttl: int) -> None:
    def write() -> None:
        pipe = connection.get_client().pipeline(transaction=False)
        pipe.hset(keys.result(jid), "progress", text)
        pipe.expire(keys.result(jid), ttl)
        pipe.execute()

    errors.best_effort("Progress", write)
