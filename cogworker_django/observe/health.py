"""``/healthz`` on a worker's ``--metrics-port``: 200 while the process's heartbeat is
fresh (it went through within three beats), 503 otherwise, with one line saying why.

A heartbeat goes through only when Redis answered it, so a worker cut off from Redis
turns 503 too; a frozen process (SIGSTOP, a wedged interpreter) answers nothing at all,
which a probe counts as a failure as well.

- One process: :class:`Freshness`, told by each beat (a worker plugin's ``beat``, after
  the presence write: the Metrics plugin, worker/supervisor.py) and asked by the exporter's thread.
- ``--processes N``: each child's beats touch a file of its own in the supervisor's
  private directory (:meth:`Freshness.beat`); the supervisor answers for all of them
  (:class:`Children`): 200 only while every child has beaten within the age (a child
  just started counts from its start).
"""

from __future__ import annotations

import os
import threading
import time

from .. import conf

# A probe fails after this many heartbeats without one going through (one late beat, a
# slow Redis, a busy host, is not a failure; as ``cogworker_status``'s default).
BEATS = 3


def max_age() -> float:
    return BEATS * conf.get().HEARTBEAT_INTERVAL


class Freshness:
    """When this process's heartbeat last went through. ``path`` (a ``--processes``
    child): a file touched at each beat, for the supervisor."""

    def __init__(self, age: float | None = None, path: str | None = None) -> None:
        self.max_age = max_age() if age is None else age
        self.path = path
        self._last: float | None = None
        self._started = time.monotonic()

    def beat(self) -> None:
        self._last = time.monotonic()
        if self.path is not None:
            with open(self.path, "a"):
                pass
            os.utime(self.path)

    def answer(self) -> tuple[bool, str]:
        """(healthy, one line)."""
        if self._last is None:
            return False, "no heartbeat yet"
        age = time.monotonic() - self._last
        if age <= self.max_age:
            return True, f"ok: heartbeat {age:.1f} s ago (max age {self.max_age:g} s)"
        return False, f"no heartbeat for {age:.1f} s (max age {self.max_age:g} s)"


class Children:
    """The supervisor's answer: every child process's beat file in ``directory``."""

    def __init__(self, directory: str, age: float | None = None) -> None:
        self.directory = directory
        self.max_age = max_age() if age is None else age
        self._started: dict[int, float] = {}  # pid -> when it was forked (epoch)
        self._lock = threading.Lock()

    def path(self, pid: int) -> str:
        return os.path.join(self.directory, f"beat-{pid}")

    def forked(self, pid: int) -> None:
        with self._lock:
            self._started[pid] = time.time()

    def exited(self, pid: int) -> None:
        with self._lock:
            self._started.pop(pid, None)
        try:
            os.unlink(self.path(pid))
        except OSError:
            pass

    def answer(self) -> tuple[bool, str]:
        with self._lock:
            started = dict(self._started)
        if not started:
            return False, "no worker process running"
        now = time.time()
        ages = {}
        for pid, at in started.items():
            try:
                at = max(at, os.stat(self.path(pid)).st_mtime)
            except OSError:
                pass  # no beat yet: counted from its start
            ages[pid] = now - at
        pid, worst = max(ages.items(), key=lambda item: item[1])
        if worst <= self.max_age:
            return True, (
                f"ok: {len(ages)} processes, each with a heartbeat within {worst:.1f} s "
                f"(max age {self.max_age:g} s)"
            )
        return False, f"process {pid}: no heartbeat for {worst:.1f} s (max age {self.max_age:g} s)"
