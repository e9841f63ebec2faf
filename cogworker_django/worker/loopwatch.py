"""The watch on the worker's event loop: its lag, and the coroutine that blocks it.

The loop runs a tick every ``TICK`` seconds; how late a tick runs is the loop's lag
(the ``cogworker_event_loop_lag_seconds`` metric: the worst of about ``LAG_WINDOW``). A coroutine that makes a blocking
call (``time.sleep``, a sync HTTP or database client, CPU-bound work) holds the loop:
no other async job moves until it returns. A watcher thread notices a tick overdue by
``BLOCKED`` and notes which run's task the loop is in (the watchdog's thread looks, at
each of its ticks: timeouts.Watchdog.also); when the loop comes back, the
late tick names it in a warning with its jid and how long it held the loop (and a hold
still going on after ``LONG_HOLD`` is named at once). At most one warning per job
function per ``WARN_EVERY``: a job that blocks on every run must not flood the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from ..observe import telemetry
from ..store import errors

if TYPE_CHECKING:
    from .aio_side import Side

log = logging.getLogger("cogworker_django")

# How often the loop ticks: the lag is known to about this.
TICK = 0.05
# A tick this late means a coroutine held the loop. (asyncio's debug mode calls a
# callback slow from 100 ms; on a busy machine the loop thread can wait that long for
# the interpreter lock or a core with no coroutine at fault, so the warning waits a
# little longer.)
BLOCKED = 0.25
# A hold still going on after this is named before it ends.
LONG_HOLD = 5.0
# Per job function, at most one warning in this many seconds.
WARN_EVERY = 60.0
# The lag metric is the worst tick of about this many seconds: a scrape every 15 s
# still sees a hold that ended between two scrapes.
LAG_WINDOW = 10.0


class LoopWatch:
    def __init__(self, side: Side) -> None:
        self.side = side
        self.lag = 0.0  # the last tick's lateness
        self.worst_lag = 0.0  # since the start (for tests and the performance notes)
        self._peak = 0.0  # the worst lag of the current window (the metric)
        self._peak_at = 0.0
        self._due = time.monotonic() + TICK
        self._suspect: Any = None  # the run the loop was in while a tick was overdue
        self._named_long: Any = None  # the run named as holding the loop still
        self._warned: dict[str, float] = {}  # job function -> last warning (monotonic)

    # The loop's side ---------------------------------------------------------------------

    def begin_ticks(self) -> None:
        """Called on the loop thread before it runs."""
        self._due = time.monotonic() + TICK
        self.side.loop.call_later(TICK, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        late = max(0.0, now - self._due)
        self.lag = late
        if late > self.worst_lag:
            self.worst_lag = late
        suspect, self._suspect = self._suspect, None
        named_long, self._named_long = self._named_long, None
        try:
            metrics = telemetry.worker_metrics()
            if late >= self._peak or now - self._peak_at > LAG_WINDOW:
                self._peak, self._peak_at = late, now
            if metrics is not None:
                metrics.loop_lag.set(self._peak)
            if late >= BLOCKED and suspect is not None and suspect is not named_long:
                self._warn(suspect, late, over=True)
        except Exception as exc:  # noqa: BLE001 - the watch never stops the loop
            errors.report("Event loop watch", exc)
        self._due = now + TICK
        self.side.loop.call_later(TICK, self._tick)

    # The watcher thread ------------------------------------------------------------------

    def look(self) -> None:
        """(The watchdog's thread, each tick.) Is a tick of the loop overdue, and which
        run's task is it in?"""
        try:
            overdue = time.monotonic() - self._due
            if overdue < BLOCKED:
                return
            run = self._run_in_hand()
            if run is None:
                return
            self._suspect = run
            if overdue >= LONG_HOLD and self._named_long is not run:
                self._named_long = run
                self._warn(run, overdue, over=False)
        except Exception as exc:  # noqa: BLE001 - the watch goes on
            errors.report("Event loop watch", exc)

    def _run_in_hand(self) -> Any:
        """What the loop is in now: the run whose task it is, or the task itself when it
        is none of the runs' (a background task a job or a client started: it blocks
        every job just the same); None outside any task."""
        loop = self.side.loop
        if loop.is_closed():
            return None
        task = asyncio.current_task(loop)
        if task is None:
            return None
        for run in list(self.side.runs.values()):
            if run.holds(task):
                return run
        return task

    def _warn(self, culprit: Any, seconds: float, *, over: bool) -> None:
        key, who = _describe(culprit)
        now = time.monotonic()
        last = self._warned.get(key)
        if last is not None and now - last < WARN_EVERY:
            return
        self._warned[key] = now
        log.warning(
            "%s %s the event loop for %.2f s%s: every other async job waited. A "
            "blocking call inside async def (time.sleep, a sync client, CPU-bound work) "
            "belongs in a plain job, or in asyncio.to_thread",
            who,
            "held" if over else "has held",
            seconds,
            "" if over else " so far",
        )


def _describe(culprit: Any) -> tuple[str, str]:
    """(what a warning is rate-limited by, how it is named): a run by its job function
    and jid; another task by its coroutine (its module and name) and the task's name."""
    if not isinstance(culprit, asyncio.Task):
        func, jid = str(culprit.job.get("func")), str(culprit.job.get("jid"))
        return func, f"{func} (jid {jid})"
    coro = culprit.get_coro()
    code = getattr(coro, "cr_code", None)
    where = getattr(coro, "__qualname__", None) or repr(coro)
    module = getattr(getattr(coro, "cr_frame", None), "f_globals", {}).get("__name__")
    name = f"{module}.{where}" if module else where
    origin = f", {code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    return (
        f"task:{name}",
        f"background task {culprit.get_name()!r} ({name}{origin}; not a job's run)",
    )
