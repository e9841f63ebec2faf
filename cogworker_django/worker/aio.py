"""The event loop of a worker process: where its ``async def`` jobs run.

One loop per process, on a thread of its own ("event-loop"), started with the manager
and closed at its stop: a client, session or pool an async job makes (at import, or on
its first run) is bound to this loop and every later run can use it.

Duties:
- sort what a fetch brings (:meth:`AsyncSide.sort`): a registered ``async def`` job, or
  a django.tasks ``async def`` task, comes here; everything else goes to the processor
  threads as before. With no async job registered nothing is sorted (the plain jobs'
  path costs what it did);
- run up to ``ASYNC_CONCURRENCY`` jobs at once, each in a task of its own
  (worker/aio_run.py); a job handed in while every slot is taken waits here, in order;
- hand each slot back to the job source as it comes free (:class:`Freed`); a success's
  ack is in the ledger and leaves with the next fetch, as a processor thread's does
  (dispatch.py), and the next fetch asks for a job for the slot;
- the heartbeat's view: :meth:`busy`; every job handed in or running is in the ledger
  (FETCHED until it starts), which is also the work board (the admin's Busy page);
- at shutdown: running jobs get the shutdown timeout (the ledger's wait); those still
  running are cancelled once the hand-over has begun (:meth:`cancel_running`), so they
  settle nothing and their jobs are requeued, never filed too (ledger.py); jobs not
  started stay on the in-progress list for the hand-over; then the loop is closed.

The in-progress list stays the record of every job taken (a SIGKILL loses none), and
the process's ledger knows every async job exactly as it knows a thread's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..core import jobs, payload
from ..store import errors
from ..store.codec import wire
from .aio_run import AsyncRun, note_connections
from .jobsource import Settles
from .ledger import Control, Ledger, Work
from .loopwatch import LoopWatch
from .processor import RunChain
from .timeouts import Watchdog

log = logging.getLogger("cogworker_django")

# How long the loop's own shutdown waits for tasks still there (runs abandoned by the
# watchdog, or that ignored their cancellation) before it closes regardless.
CLOSE_WAIT = 2.0


class Freed:
    """Handed in to the job source as async runs end: ``slots`` came free (their
    successes' acks wait in the ledger). One per turn of the loop however many runs
    ended in it: each hand-in wakes the feeder thread."""

    __slots__ = ("slots",)

    def __init__(self, slots: int) -> None:
        self.slots = slots


class Sorter:
    """Which fetched jobs are async ones. Built once, after the job modules were imported
    (the registry is complete then)."""

    def __init__(self) -> None:
        self.paths = frozenset(fn.path for fn in jobs.registered_jobs() if fn.is_async)
        self.tasks = jobs.has_kind("task")
        self.active = bool(self.paths or self.tasks)

    def job_of(self, work: Work) -> dict[str, Any] | None:
        """The decoded job when ``work`` is an async one, else None. A payload is decoded
        only when its text names an async job's path (or is a django.tasks task)."""
        raw = work.raw
        if not any(p in raw for p in self.paths) and not (self.tasks and '"kind"' in raw):
            return None
        job = payload.decode(wire(raw), work.queue)
        if job.get("kind"):
            if job.get("kind") != "task" or not self.tasks:
                return None
            from ..djtasks import runner

            return job if runner.is_async(job) else None
        fn = jobs.registered(str(job.get("func")))
        return job if fn is not None and fn.is_async else None


class AsyncSide:
    """The loop, its slots and its runs (see the module docstring)."""

    def __init__(
        self,
        capacity: int,
        *,
        ledger: Ledger,
        strategy: Settles,
        control: Control,
        watchdog: Watchdog,
        chain: RunChain,
        hand_in: Callable[[Freed], None],
    ) -> None:
        self.capacity = capacity
        self.ledger = ledger
        self.strategy = strategy
        self.control = control
        self.watchdog = watchdog
        self.chain = chain
        self.hand_in = hand_in
        self.sorter = Sorter()
        self.loop = asyncio.new_event_loop()
        # Helpers off the loop: Redis work of a run's settlement, and the middleware
        # with no async side (worker/aio_chain.py). At most one per slot is ever busy.
        self.executor = ThreadPoolExecutor(max_workers=capacity, thread_name_prefix="async-helper")
        self.runs: dict[int, AsyncRun] = {}  # running now (loop thread only)
        self._backlog: deque[tuple[Work, dict[str, Any]]] = deque()
        self._taken = 0  # slots in use (loop thread only; read elsewhere as a number)
        self._freed_slots = 0  # slots freed in this turn of the loop, not yet handed in
        self._names = itertools.count()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.watch = LoopWatch(self)
        self.started_runs = 0  # (for tests and the performance notes)
        note_connections()

    # The job source's side (the feeder thread) ---------------------------------------------

    def sort(self, work: Work) -> dict[str, Any] | None:
        return self.sorter.job_of(work) if self.sorter.active else None

    def submit(self, items: list[tuple[Work, dict[str, Any]]]) -> None:
        """Jobs for this loop, fetched for its free slots (one wake-up for them all; each
        is in the ledger, FETCHED, until it starts)."""
        self.loop.call_soon_threadsafe(self._take, items)

    def busy(self) -> int:
        return self._taken

    # The loop's side -------------------------------------------------------------------

    def _take(self, items: list[tuple[Work, dict[str, Any]]]) -> None:
        for item in items:
            if self._taken < self.capacity:
                self._start(*item)
            else:
                self._backlog.append(item)

    def _start(self, work: Work, job: dict[str, Any]) -> None:
        if self.control.stopping.is_set():
            return  # left listed (and known) for the hand-over to requeue
        run = AsyncRun(self, work, job, f"async-{next(self._names)}")
        run.begin()  # started in the ledger
        self._taken += 1
        self.started_runs += 1
        self.runs[id(run)] = run
        run.outer = self.loop.create_task(self._drive(run))

    async def _drive(self, run: AsyncRun) -> None:
        try:
            await run.process()
        except BaseException as exc:  # noqa: BLE001 - a bug: logged, the slot still comes back
            log.error("%s failed: %s", run.name, errors.describe(exc), exc_info=exc)
            if not run.abandoned:
                self.ledger.forget(run.attempt.work)  # the reconcile requeues its job
        finally:
            self.runs.pop(id(run), None)
            self.free(run)

    def free(self, run: AsyncRun) -> None:
        """The run's slot comes back (once per run; on the loop thread): a waiting job
        starts, and the job source is told."""
        if run.slot_freed:
            return
        run.slot_freed = True
        self._taken -= 1
        if not self._freed_slots:
            self.loop.call_soon(self._hand_freed_in)
        self._freed_slots += 1
        backlog = self._backlog
        while backlog and self._taken < self.capacity:
            self._start(*backlog.popleft())

    def _hand_freed_in(self) -> None:
        freed = Freed(self._freed_slots)
        self._freed_slots = 0
        self.hand_in(freed)

    def free_threadsafe(self, run: AsyncRun) -> None:
        """From another thread (the watchdog abandoned the run): its slot comes back."""
        try:
            self.loop.call_soon_threadsafe(self.free, run)
        except RuntimeError:
            pass  # the loop is closed: nothing runs any more

    # Lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="event-loop", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        self.watchdog.also.append(self.watch.look)

    def _serve(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        loop.call_soon(self._ready.set)
        self.watch.begin_ticks()
        try:
            loop.run_forever()
        finally:
            self._close()

    def _close(self) -> None:
        loop = self.loop
        try:
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=CLOSE_WAIT))
            loop.run_until_complete(loop.shutdown_asyncgens())
        except Exception as exc:  # noqa: BLE001 - closing regardless
            log.warning("the event loop did not close cleanly: %s", errors.describe(exc))
        finally:
            loop.close()

    def cancel_running(self, wait: float) -> int:
        """Cancel every job still running (the hand-over has begun: none of them
        settles, each is requeued) and wait up to ``wait`` for them to unwind; returns
        how many were cancelled."""
        runs = list(self.runs.values())
        for run in runs:
            try:
                self.loop.call_soon_threadsafe(run.cancel_for_shutdown)
            except RuntimeError:
                return 0  # the loop is closed
        deadline = time.monotonic() + wait
        while any(id(r) in self.runs and not r.abandoned for r in runs):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if runs:
            # One line for all of them (a hundred coroutines made a hundred lines).
            log.warning(
                "cancelled %d coroutine(s) still running at the stop: they unwound and "
                "settled nothing; the hand-over requeues each",
                len(runs),
            )
        return len(runs)

    def stop(self) -> None:
        """Close the loop (after the hand-over): what still runs on it is cancelled."""
        if self.watch.look in self.watchdog.also:
            self.watchdog.also.remove(self.watch.look)
        thread = self._thread
        if thread is not None and thread.is_alive():
            try:
                self.loop.call_soon_threadsafe(self.loop.stop)
            except RuntimeError:
                pass
            thread.join(CLOSE_WAIT + 3.0)
        self.executor.shutdown(wait=False, cancel_futures=True)
