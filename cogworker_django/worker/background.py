"""The one lifecycle of a worker's background threads, and the chores thread.

:class:`Background` is a thread with a name, one pass of work (:meth:`Background.step`,
which says how long until the next), a wait between passes that :meth:`Background.wake`
ends early, and start / stop / join. A pass that raises is logged and the thread goes on
after ``RESTART_PAUSE``: no duty of the worker dies for good with a bug in one pass.
docs/workers.md lists every such thread (tests/worker/test_worker_signals.py holds the table to
what TTIN reports).

:class:`Chores` is one of them: every duty that runs now and then and needs Redis only
(moving due jobs, orphan recovery, filing ``P:unsettled``, the key guard, the periodic
ticks, the history's flushes, the limiter waker, starting the durable relay's rounds).
Each is a :class:`Chore` that says after each run when it is due again; one that raises
is reported under its name (rule 4) and due again after its interval. They share a
thread, so a slow one delays the others by its length (each is a few round trips; a
database, which may hang for minutes, is never waited for here: durable/chore.py).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..store import errors

log = logging.getLogger("cogworker_django")

# A pass that raised (a bug, never an outage: those are each duty's to report) is
# followed by the next after this pause.
RESTART_PAUSE = 1.0


class Background:
    """One background thread (see the module docstring); a subclass gives :meth:`step`,
    and may give :meth:`first` (once, before the passes), :meth:`last` (once, after) and
    :meth:`rest` (the wait between passes)."""

    name = "background"

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> float | None:
        """One pass; returns the seconds until the next one (None: as soon as woken)."""
        raise NotImplementedError

    def first(self) -> None:
        """Before the first pass, on the thread."""

    def last(self) -> None:
        """After the last pass, on the thread."""

    def rest(self, seconds: float | None) -> None:
        """The wait between two passes: ends at :meth:`wake` or :meth:`stop`."""
        self._wake.wait(seconds)
        self._wake.clear()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the thread to end; True when it has (or never ran)."""
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._guarded(self.first)
            while not self._stop.is_set():
                pause = self._guarded(self.step, RESTART_PAUSE)
                if self._stop.is_set():
                    break
                self.rest(pause)
        finally:
            self._guarded(self.last)

    def _guarded(self, fn: Callable[[], Any], on_error: Any = None) -> Any:
        try:
            return fn()
        except BaseException as exc:  # noqa: BLE001 - a bug must not end the duty for good
            log.error("the %s failed: %s", self.name, errors.describe(exc), exc_info=exc)
            return on_error


class Chore:
    """One duty of the chores thread: ``run(conn)`` returns the seconds until it is due
    again (None: ``interval``). ``wake()`` (any thread) makes it due now. A run that
    raises is reported under ``name`` and due again after ``interval``."""

    def __init__(
        self,
        name: str,
        run: Callable[[Any], float | None],
        interval: float,
        *,
        first_at: float = 0.0,
    ) -> None:
        self.name = name
        self.run = run
        self.interval = interval
        self.first_at = first_at  # seconds after the chores' start of its first run
        self.owner: Chores | None = None

    def wake(self) -> None:
        if self.owner is not None:
            self.owner.due_now(self)

    def __repr__(self) -> str:
        return f"<Chore {self.name}>"


class Chores(Background):
    """The chores thread: runs each :class:`Chore` when it is due, earliest first. Its
    schedule is the thread's own; other threads only ask for a chore to run now
    (:meth:`due_now`), through a queue."""

    name = "chores"

    def __init__(self, client: Callable[[], Any]) -> None:
        super().__init__()
        self._client = client  # the Redis client of the process (connection.get_client)
        self._heap: list[tuple[float, int, Chore]] = []  # (the chores thread's only)
        self._due: dict[int, float] = {}  # id(chore) -> when it is due (the heap may lag)
        self._order = itertools.count()
        self._woken: queue.SimpleQueue[Chore] = queue.SimpleQueue()
        self.chores: list[Chore] = []

    def add(self, chore: Chore) -> Chore:
        """(Before :meth:`start`.) Run ``chore``, first ``chore.first_at`` seconds from now."""
        chore.owner = self
        self.chores.append(chore)
        self._schedule(chore, time.monotonic() + chore.first_at)
        return chore

    def due_now(self, chore: Chore) -> None:
        """(Any thread.) Run ``chore`` as soon as the thread can."""
        self._woken.put(chore)
        self.wake()

    def _schedule(self, chore: Chore, at: float) -> None:
        if self._due.get(id(chore), float("inf")) <= at:
            return  # already due sooner
        self._due[id(chore)] = at
        heapq.heappush(self._heap, (at, next(self._order), chore))

    def _next(self, now: float) -> Chore | float | None:
        """The chore due now (taken off the schedule), else the seconds until one is."""
        while True:
            try:
                self._schedule(self._woken.get_nowait(), now)
            except queue.Empty:
                break
        heap = self._heap
        while heap and heap[0][0] != self._due.get(id(heap[0][2])):
            heapq.heappop(heap)  # superseded by a sooner schedule
        if not heap:
            return None
        at, _n, chore = heap[0]
        if at > now:
            return at - now
        heapq.heappop(heap)
        self._due.pop(id(chore), None)
        return chore

    def step(self) -> float | None:
        conn = self._client()
        while not self.stopping:
            chore = self._next(time.monotonic())
            if not isinstance(chore, Chore):
                return chore
            pause: float | None = None
            try:
                pause = chore.run(conn)
            except Exception as exc:  # noqa: BLE001 - one chore never stops the others
                errors.report(chore.name, exc)
            self._schedule(chore, time.monotonic() + (chore.interval if pause is None else pause))
        return None
