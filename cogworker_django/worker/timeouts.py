"""The watchdog: time limits and cancellation enforced from outside the job.

One thread per process (background.Background) watches every run inside its job
function, and carries the event loop's watch too (loopwatch.py):

- at the run's deadline (its ``timeout``, else ``DEFAULT_TIMEOUT``) it raises
  ``JobTimeout`` inside the job's thread, with CPython's per-thread asynchronous
  exception (``PyThreadState_SetAsyncExc``): pure Python stops at its next bytecode. An
  ``async def`` job is cancelled through its event loop instead (its task gets
  ``CancelledError`` at its ``await``, turned into ``JobTimeout``);
- a cancelled run (``api.cancel``) sees ``cancelled()`` turn True at once; if it is
  still running ``CANCEL_GRACE`` later, ``JobCancelled`` is raised in it the same way;
- a run still inside its job ``TIMEOUT_GRACE`` after either was raised is stuck where
  no exception reaches (a C call: ``time.sleep``, a socket read without a timeout, a
  lock): it is *abandoned*. ``Ledger.abandon`` claims its settlement for it, under the
  same lock the run's own claim takes, so exactly one of them wins; when the watchdog
  wins, the job is filed (``JobTimeout``: retry or dead; ``JobCancelled``: dropped), its
  leases freed, its processor replaced, and the stuck thread, should it ever return,
  is refused its claim: it acks, files and releases nothing (ledger.py).

Only the job function is timed: the server middleware around it (history, locks,
results) is never interrupted, so nothing it holds is left half-done.

Delivery is lock-free on the job's side: the watchdog raises only while the run is
armed and marks what it raised before it lets go (``firing``); the run, leaving, disarms,
waits for a raise in flight to land, and clears one not yet delivered, catching a late
delivery until it is done. No interruption ever escapes into the processor's own code.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import conf
from ..controls import options, runtime
from ..controls.errors import JobCancelled, JobTimeout
from .background import Background

log = logging.getLogger("cogworker_django")

# How often the watchdog looks: a timeout lands within about this much of its deadline.
TICK = 0.1


def raise_in(thread_id: int, exc_class: type[BaseException] | None) -> int:
    """Set (or with None clear) the pending asynchronous exception of a thread."""
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_class) if exc_class else None
    )


class Watched:
    """One run inside its job, as the watchdog sees it."""

    __slots__ = (
        "processor",
        "work",
        "job",
        "state",
        "deadline",
        "cancel_at",
        "armed",
        "firing",
        "fired",
        "fired_at",
        "abandoned",
        "loop",
        "task",
    )

    def __init__(self, processor: Any, work: Any, job: dict[str, Any], state: Any) -> None:
        self.processor = processor
        self.work = work
        self.job = job
        self.state = state
        self.deadline = time.monotonic() + state.timeout if state.timeout else None
        self.cancel_at: float | None = None
        self.armed = False
        self.firing = False
        self.fired: type[BaseException] | None = None
        self.fired_at = 0.0
        self.abandoned = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None


class Watchdog(Background):
    name = "watchdog"

    def __init__(self, on_abandon: Callable[[Watched], None]) -> None:
        super().__init__()
        self.on_abandon = on_abandon
        self._runs: dict[int, Watched] = {}
        # Other watches that ride this thread's ticks (the event loop's: loopwatch.py).
        self.also: list[Callable[[], None]] = []
        # Calls made on this thread at its next tick, in order (call_soon).
        self._calls: queue.SimpleQueue[Callable[[], Any]] = queue.SimpleQueue()

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """(Any thread.) ``fn()`` on the watchdog's thread at its next tick: the pool's
        replacements of dead or abandoned threads are made there, one at a time."""
        self._calls.put(fn)
        self.wake()

    # The job's side -----------------------------------------------------------------------

    def run(self, processor: Any, work: Any, job: dict[str, Any], runner: Any) -> Any:
        """``runner()`` (what jobs.resolve made of ``job``; an ``async def`` job's
        coroutine awaited on its own event loop) under this run's time limit and
        cancellation. The caller has made ``job`` the thread's current job
        (jobs.running)."""
        timeout = options.run_timeout(job, conf.get().DEFAULT_TIMEOUT)
        state = runtime.RunState(str(job.get("jid")), str(job.get("func")), timeout)
        w = Watched(processor, work, job, state)
        previous = runtime.bind(state)
        try:
            self._runs[id(w)] = w
            w.armed = True  # from here an interruption may come: inside the try
            result = runner()
            if inspect.isawaitable(result):
                return self._run_async(w, result)
            return result
        finally:
            self._disarm(w)
            runtime.bind(previous)

    def _disarm(self, w: Watched) -> None:
        while True:
            try:
                w.armed = False
                while w.firing:  # a raise in flight: let it land, then clear it
                    time.sleep(0.0005)
                if w.fired is not None:
                    raise_in(w.state.thread_id, None)
                self._runs.pop(id(w), None)
                return
            except (JobTimeout, JobCancelled):
                continue  # delivered after the job returned: meant for the job, not us

    def _run_async(self, w: Watched, awaitable: Any) -> Any:
        async def main() -> Any:
            w.task = asyncio.current_task()
            if w.fired is not None:
                raise w.fired()
            return await awaitable

        with asyncio.Runner() as runner:
            w.loop = runner.get_loop()
            try:
                return runner.run(main())
            except asyncio.CancelledError:
                if w.fired is not None:
                    raise w.fired() from None
                raise
            finally:
                w.loop = w.task = None

    # Cancellation ------------------------------------------------------------------------

    def cancel(self, jid: str, grace: float | None = None) -> int:
        """Flag every run of ``jid`` in a job here; returns how many."""
        grace = conf.get().CANCEL_GRACE if grace is None else grace
        n = 0
        for w in list(self._runs.values()):
            if w.state.jid == jid and w.armed:
                if not w.state.cancel_requested:
                    log.info("%s (jid %s): cancel requested", w.state.func, jid)
                    w.state.cancel_requested = True
                    w.cancel_at = time.monotonic() + grace
                n += 1
        return n

    def watch(self, w: Watched) -> None:
        """Watch a run that takes its interruption itself: an async job's on the worker's
        event loop (worker/aio_run.py), whose ``w.task.cancel`` is called on ``w.loop``."""
        w.armed = True
        self._runs[id(w)] = w

    def unwatch(self, w: Watched) -> None:
        w.armed = False
        self._runs.pop(id(w), None)

    def running_jids(self) -> set[str]:
        return {w.state.jid for w in list(self._runs.values())}

    # The watchdog's side -----------------------------------------------------------------

    def step(self) -> float:
        now = time.monotonic()
        grace = conf.get().TIMEOUT_GRACE
        for w in list(self._runs.values()):
            try:
                self._check(w, now, grace)
            except Exception:  # noqa: BLE001 - one run never stops the watch of others
                log.exception("watchdog: %s (jid %s)", w.state.func, w.state.jid)
        for check in self.also:
            try:
                check()
            except Exception:  # noqa: BLE001 - one watch never stops the others
                log.exception("watchdog: %s", getattr(check, "__qualname__", check))
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                return TICK
            try:
                call()
            except Exception:  # noqa: BLE001 - one call never stops the others
                log.exception("watchdog: %s", getattr(call, "__qualname__", call))

    def first(self) -> None:
        self.rest(TICK)

    def _check(self, w: Watched, now: float, grace: float) -> None:
        if not w.armed or w.abandoned:
            return
        if w.fired is None:
            if w.deadline is not None and now >= w.deadline:
                self._fire(w, JobTimeout)
            elif w.cancel_at is not None and now >= w.cancel_at:
                self._fire(w, JobCancelled)
        elif now - w.fired_at >= grace:
            w.abandoned = True
            threading.Thread(
                target=self.on_abandon, args=(w,), name=f"abandon-{w.state.jid}", daemon=True
            ).start()

    def _fire(self, w: Watched, exc_class: type[BaseException]) -> None:
        w.firing = True
        try:
            if not w.armed:
                return
            w.fired, w.fired_at = exc_class, time.monotonic()
            what = "timed out" if exc_class is JobTimeout else "cancelled"
            log.warning("%s (jid %s) %s: interrupting it", w.state.func, w.state.jid, what)
            loop, task = w.loop, w.task
            if loop is not None and task is not None:
                try:
                    loop.call_soon_threadsafe(task.cancel)
                    return
                except RuntimeError:
                    pass  # its loop just closed: the thread is back in plain Python
            raise_in(w.state.thread_id, exc_class)
        finally:
            w.firing = False
