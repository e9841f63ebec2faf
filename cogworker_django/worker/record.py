"""This process's own record of its jobs, trusted over Redis (which may be what is
failing, or may have lost its last writes in a failover).

- *running*: fetched and not yet settled (a count per raw payload: two copies of one
  payload can run at once);
- *performing*: the subset still inside the job function (the heartbeat keeps their
  locks alive, and only theirs);
- *pending*: finished, but not yet settled in Redis: an ack that has not gone through,
  or a failure that could not be filed. Retried on every heartbeat and at shutdown.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .fetch import Work


@dataclass(frozen=True)
class Filing:
    """A finished job still to be filed: ZADD ``payload`` to ``target`` at ``score``."""

    target: str  # "retry", "dead" or "schedule"
    score: float
    payload: str


ACK = "ack"


class Record:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, list[Work]] = {}
        self._performing: dict[str, int] = {}
        self._pending: dict[str, str | Filing] = {}

    def started(self, work: Work) -> None:
        with self._lock:
            self._running.setdefault(work.raw, []).append(work)
            self._performing[work.raw] = self._performing.get(work.raw, 0) + 1

    def performed(self, work: Work) -> None:
        with self._lock:
            n = self._performing.get(work.raw, 0) - 1
            if n > 0:
                self._performing[work.raw] = n
            else:
                self._performing.pop(work.raw, None)

    def finished(self, work: Work) -> None:
        with self._lock:
            works = self._running.get(work.raw)
            if works:
                works.pop()
                if not works:
                    del self._running[work.raw]

    def settle_later(self, raw: str, how: str | Filing) -> None:
        with self._lock:
            self._pending[raw] = how

    def settled(self, raw: str, how: str | Filing | None = None) -> None:
        with self._lock:
            if how is None or self._pending.get(raw) == how:
                self._pending.pop(raw, None)

    def running(self) -> list[Work]:
        with self._lock:
            return [w for works in self._running.values() for w in works]

    def running_raws(self) -> set[str]:
        with self._lock:
            return set(self._running)

    def performing(self) -> list[str]:
        with self._lock:
            return list(self._performing)

    def pending(self) -> dict[str, str | Filing]:
        with self._lock:
            return dict(self._pending)
