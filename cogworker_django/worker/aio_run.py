"""One async job's run on the worker's event loop: a processor thread's duties
(processor.py), for a coroutine.

- the run is known to the record (running, performing, its claim of settlement) and on
  the work board, exactly as a thread's run is;
- the server chain runs around it (worker/aio_chain.py), and the job function's
  coroutine is awaited under the watchdog (timeouts.py): its time limit and a cancel
  reach it as a cancellation of the task it runs in, delivered only while it is inside
  the job, and turned into ``JobTimeout`` / ``JobCancelled``;
- settlement as a thread settles: a success is acked with the next fetch (the slot is
  handed back with it, aio.py); a failure is filed in retry or dead; what touches Redis
  runs on a helper thread, never on the loop (a round trip would stall every other run);
- a database connection the run opened (Django's async ORM runs in asgiref's
  thread-sensitive executor) is closed after it, as a processor closes its own;
- at shutdown, once the hand-over has begun, :meth:`AsyncRun.cancel_for_shutdown`: the
  run is refused its settlement (its job is requeued) and settles nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import conf
from ..controls import expiry, options, runtime
from ..controls.errors import JobCancelled, JobTimeout, while_unwinding
from ..core import departures, jobs, locks, middleware, payload, progress, staleness
from ..core.retry import Discard
from ..core.taskcontext import TaskRun, current
from ..observe import stats
from ..store import connection as redis_connection
from ..store import errors, keys
from . import aio_chain, failures
from .processor import Dropped, Settler, dropped_for, kept
from .record import ACK, Work
from .timeouts import Watched

if TYPE_CHECKING:
    from .aio_side import Side

log = logging.getLogger("cogworker_django")


class AsyncRun(Settler):
    # No processor slot of the manager's (Manager._abandon looks for one).
    index = -1
    thread = None

    def __init__(self, side: Side, work: Work, job: dict[str, Any], name: str) -> None:
        self.side = side
        self.work = work
        # The run's own dict: current_job() gives it, with progress() (core/results.py).
        self.job = job if isinstance(job, progress.RunningJob) else progress.RunningJob(job)
        self.name = name
        self.record = side.record
        self.strategy = side.strategy
        self.board = side.board
        self.busy = True
        self.abandoned = False  # the watchdog settled it (Settler.abandon_run)
        self.stopped = False  # cancelled by the stop (cancel_for_shutdown)
        self.slot_freed = False  # (aio.AsyncSide.free)
        self._job_of_run: dict[str, Any] | None = job
        self._on_filed: Any = None  # a Reschedule's (limiters), told around its filing
        self._performing: Work | None = None
        self._inner: asyncio.Task | None = None  # the task awaiting the job, while it does
        self.outer: asyncio.Task | None = None  # the run's own task (aio.AsyncSide._start)
        self.context: TaskRun | None = None
        self.runner: Any = None

    # The run -----------------------------------------------------------------------------

    def begin(self) -> None:
        """On the loop, as the run is given its slot: known to the record from here on
        (the heartbeat's reconcile never sees it unknown between the two)."""
        work, job = self.work, self.job
        try:
            self.runner = jobs.resolve(job) if job["func"] != payload.UNPARSEABLE else None
        except Exception as exc:  # noqa: BLE001 - a resolver that raises: filed in dead
            log.error(
                "%s (jid %s) could not be resolved: %s",
                job.get("func"),
                job.get("jid"),
                errors.describe(exc),
            )
            self.runner = None
        self.context = TaskRun(job, self.runner)
        self.record.started(work)
        self.board.started(self.name, work)
        self._performing = work

    async def process(self) -> Work | None:
        """Run the job and settle it (after :meth:`begin`); returns the work to ack (a
        success)."""
        work, job, record, runner = self.work, self.job, self.record, self.runner
        current.set(self.context)  # this task's context only (each run is a task)
        ack_later = False
        try:
            ack_later = await self._run_and_settle(work, job, runner)
        finally:
            if self.abandoned:
                record.left(work)  # filed for it by the watchdog
                ack_later = False
            else:
                self.busy = False
                self.board.finished(self.name)
                if not ack_later:
                    record.finished(work)
        return work if ack_later else None

    async def _run_and_settle(self, work: Work, job: dict[str, Any], runner: Any) -> bool:
        """True when the run succeeded and its ack is left to the job source."""
        try:
            outcome = await self._execute(job, work, runner)
        finally:
            self._end_perform(work)  # (unless perform was never reached)
        await self.job.progress_written()
        if locks.run_abandoned():
            # (The stop's own cancellations are told in one line: AioLoop.cancel_running.)
            if not self.abandoned and not self.stopped:
                log.warning(
                    "%s (jid %s) ended after the shutdown hand-over requeued it: left to its "
                    "requeued copy",
                    job["func"],
                    job["jid"],
                )
            return False
        try:
            if outcome is None:
                stats.counters.incr("processed")
                ended = kept(job, "succeeded", value=self._returned)
                self.record.settle_later(work.raw, ACK, ended)
                return True
            if isinstance(outcome, Dropped):
                await self._off(departures.job_left, job, outcome.reason)
                self.record.settle_later(work.raw, ACK, outcome.ended(job))
                return True
            target, score = outcome
            if target != "schedule":
                stats.counters.incr("failed")
            filing = failures.filing_for(work, job, target, score)
            await self._off(self._file, work, filing, job)
            return False
        finally:
            self.record.settlement_done(work)

    async def _execute(
        self, job: dict[str, Any], work: Work, runner: Any
    ) -> tuple[str, float] | Dropped | None:
        """None on success, Dropped, else (target set, score), as Processor._execute."""
        queue = work.queue
        if job["func"] == payload.UNPARSEABLE:
            return "dead", time.time()
        if runner is None:
            log.error("%s (jid %s) is not a registered job: filed in dead", job["func"], job["jid"])
            await self._off(locks.release_job_locks, job)
            return failures.to_dead(job, "NotRegistered", staleness.not_registered(job["func"]))
        now = time.time()
        if expiry.expired(job, now):
            return self._expired(job, queue, now)
        try:
            links = self.side.chain.links(job)
            perform = self._perform_of(job, work, runner)
            if links:
                await aio_chain.run(links, job, queue, perform, self.side)
            else:
                await perform()
            return None
        except middleware.Reschedule as r:
            self._on_filed = r.on_filed
            return "schedule", time.time() + failures.reschedule_delay(r)
        except JobCancelled as exc:
            log.warning("%s (jid %s) cancelled: %s", job["func"], job["jid"], errors.describe(exc))
            await self._off(_forget_cancel, job["jid"])
            return dropped_for(exc)
        except Discard as exc:
            log.info("%s (jid %s) discarded: %s", job["func"], job["jid"], exc.reason)
            return dropped_for(exc)
        except BaseException as exc:  # noqa: BLE001 - every failure is filed (as a thread's)
            # (A CancelledError here is the shutdown's: the run is abandoned to its
            # requeued copy by then, and nothing below settles it.)
            return await self._off(self._failed, job, exc)
        finally:
            context = self.context
            if context is not None and context.used_db:
                await _close_db_connections()

    def _perform_of(self, job: dict[str, Any], work: Work, runner: Any) -> Callable[[], Any]:
        async def perform() -> Any:
            return await self._perform(job, work, runner)

        return perform

    async def _perform(self, job: dict[str, Any], work: Work, runner: Any) -> Any:
        """The innermost link: the job's coroutine under its time limit and cancellation,
        then the claim of its settlement."""
        state = runtime.RunState(
            str(job.get("jid")),
            str(job.get("func")),
            options.run_timeout(job, conf.get().DEFAULT_TIMEOUT),
        )
        context = self.context
        assert context is not None
        context.state = state
        w = Watched(self, work, job, state)
        w.loop = self.side.loop
        w.task = self  # type: ignore[assignment]  # the watchdog calls our cancel()
        self._inner = asyncio.current_task()
        self.side.watchdog.watch(w)
        try:
            arun = getattr(runner, "arun", None)
            result = arun() if arun is not None else runner()
            if inspect.isawaitable(result):
                result = await result
            self._returned = result  # the job's own (kept as its result)
            return result
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # handled here: the task itself goes on (settlement)
            if w.fired is not None:
                raise w.fired() from None  # JobTimeout / JobCancelled
            raise
        except Exception as exc:
            if w.fired is JobTimeout:
                # Raised while the timeout's cancellation unwound the coroutine (a
                # finally that raised): the run ended by its time limit all the same.
                raise while_unwinding(JobTimeout(), exc) from exc
            raise
        finally:
            self.side.watchdog.unwatch(w)
            self._inner = None
            context.state = None
            self._end_perform(work)

    def _end_perform(self, work: Work) -> None:
        """Once per run: no longer performing, and the claim of its settlement (refused
        once the shutdown hand-over has begun: the run is abandoned to its copy)."""
        if self._performing is not work:
            return
        self._performing = None
        self.record.performed(work)
        if not self.record.claim_settlement(work):
            assert self.context is not None
            self.context.abandoned = True

    async def _off(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on a helper thread, in this run's context (Redis round trips,
        the failure path's work): the loop goes on meanwhile."""
        return await aio_chain.in_helper(self.side, fn, *args)

    # Interruptions (always on the loop thread) ------------------------------------------

    def cancel(self) -> None:
        """The watchdog's interruption (timeout, cancel): the job's task is cancelled if
        the run is still inside the job; a late one, after it left, does nothing."""
        inner = self._inner
        if inner is not None and not inner.done():
            inner.cancel()

    def cancel_for_shutdown(self) -> None:
        self.stopped = True
        self.cancel()

    def holds(self, task: Any) -> bool:
        """Whether ``task`` is this run's (its own, or the one awaiting its job)."""
        return task is self.outer or task is self._inner

    # Abandonment (on the watchdog's side) -----------------------------------------------

    def abandon_run(self, work: Work, exc: BaseException) -> bool:
        """Settle a run that ignores its interruption (Settler.abandon_run), and give its
        slot back: the coroutine may run on, but settles nothing."""
        if not super().abandon_run(work, exc):
            return False
        self.side.free_threadsafe(self)
        return True


def _forget_cancel(jid: str) -> None:
    errors.best_effort("Cancel", lambda: redis_connection.get_client().zrem(keys.cancels(), jid))


def note_connections() -> None:
    """Mark each run that opens a database connection (once per process), so that only
    those pay for the hop to close it."""
    from django.db.backends.signals import connection_created

    connection_created.connect(_opened, dispatch_uid="cogworker-async-run-db")


def _opened(sender: Any, **kwargs: Any) -> None:
    # Sent on the thread that connects, in the context sync_to_async copied from the run.
    run = current.get()
    if run is not None:
        run.used_db = True


async def _close_db_connections() -> None:
    """Close the connections a run opened through Django's async ORM (or
    ``sync_to_async``): they live in asgiref's thread-sensitive executor thread, and are
    closed there, as a processor thread closes its own after a run."""
    from asgiref.sync import sync_to_async
    from django.db import close_old_connections

    try:
        await sync_to_async(close_old_connections, thread_sensitive=True)()
    except Exception as exc:  # noqa: BLE001 - never fails the run
        log.warning("database connections not closed after an async run: %s", errors.describe(exc))
