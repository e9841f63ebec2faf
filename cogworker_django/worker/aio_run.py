"""One async job's run on the worker's event loop: the coroutine driver of a run
(worker/run.py, written once for threads and the loop).

- the run is in the ledger (its start, its claim of settlement) and on the work board,
  exactly as a thread's run is;
- the server chain runs around it (worker/aio_chain.py), and the job function's
  coroutine is awaited under the watchdog (timeouts.py): its time limit and a cancel
  reach it as a cancellation of the task it runs in, delivered only while it is inside
  the job, and turned into ``JobTimeout`` / ``JobCancelled``;
- what touches Redis or the database in the run's settlement (a ``run.Call``) runs on a
  helper thread, never on the loop (a round trip would stall every other run);
- a database connection the run opened (Django's async ORM runs in asgiref's
  thread-sensitive executor) is closed after it, as a processor closes its own;
- at shutdown, once the hand-over has begun, :meth:`AsyncRun.cancel_for_shutdown`: the
  run is refused its settlement (its job is requeued) and settles nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any

from .. import conf
from ..controls import options, runtime
from ..controls.errors import JobTimeout, while_unwinding
from ..core import jobs, payload, progress
from ..core.taskcontext import TaskRun, current
from ..store import errors
from . import aio_chain, run
from .ledger import Work
from .processor import advance
from .timeouts import Watched

if TYPE_CHECKING:
    from .aio_side import Side

log = logging.getLogger("cogworker_django")


class AsyncRun:
    # No processor slot of the manager's (Manager._abandon looks for one).
    index = -1
    thread = None

    def __init__(self, side: Side, work: Work, job: dict[str, Any], name: str) -> None:
        self.side = side
        self.name = name
        self.ledger = side.ledger
        self.strategy = side.strategy
        # The run's own dict: current_job() gives it, with progress() (core/progress.py).
        self.attempt = run.Attempt(work, progress.RunningJob(job), None)
        self.slot_freed = False  # (aio.AsyncSide.free)
        self.stopped = False  # cancelled by the stop (cancel_for_shutdown)
        self._inner: asyncio.Task | None = None  # the task awaiting the job, while it does
        self.outer: asyncio.Task | None = None  # the run's own task (aio.AsyncSide._start)
        self.context: TaskRun | None = None

    @property
    def job(self) -> dict[str, Any]:
        return self.attempt.job

    @property
    def abandoned(self) -> bool:
        return self.attempt.abandoned

    # The run -----------------------------------------------------------------------------

    def begin(self) -> None:
        """On the loop, as the run is given its slot: started in the ledger."""
        attempt = self.attempt
        job = attempt.job
        try:
            attempt.runner = jobs.resolve(job) if job["func"] != payload.UNPARSEABLE else None
        except Exception as exc:  # noqa: BLE001 - a resolver that raises: filed in dead
            log.error(
                "%s (jid %s) could not be resolved: %s",
                job.get("func"),
                job.get("jid"),
                errors.describe(exc),
            )
        self.context = TaskRun(job, attempt.runner)
        self.ledger.start(attempt.work, self.name)

    async def process(self) -> None:
        """Drive the run to its settlement (after :meth:`begin`)."""
        current.set(self.context)  # this task's context only (each run is a task)
        steps = run.steps(self, self.attempt)
        effect = advance(steps, None, None)
        while effect is not None:
            effect = advance(steps, *(await self._do(effect)))

    async def _do(self, effect: run.Perform | run.Call) -> tuple[Any, BaseException | None]:
        try:
            if isinstance(effect, run.Perform):
                await self._chain_and_job(effect.attempt)
                return None, None
            return await aio_chain.in_helper(self.side, effect.fn, *effect.args), None
        except BaseException as exc:  # noqa: BLE001 - thrown into the run: its outcome
            # (A CancelledError here is the shutdown's: the run is refused its claim by
            # then, and nothing settles it.)
            return None, exc

    async def _chain_and_job(self, attempt: run.Attempt) -> None:
        job = attempt.job
        try:
            links = self.side.chain.links(job)
            if links:
                await aio_chain.run(links, job, attempt.work.queue, self._perform, self.side)
            else:
                await self._perform()
        finally:
            context = self.context
            if context is not None and context.used_db:
                await _close_db_connections()
            # Its last progress write lands before the end, which carries the last report.
            await job.progress_written()

    async def _perform(self) -> Any:
        """The innermost link: the job's coroutine under its time limit and cancellation,
        then the claim of its settlement."""
        attempt = self.attempt
        job = attempt.job
        state = runtime.RunState(
            str(job.get("jid")),
            str(job.get("func")),
            options.run_timeout(job, conf.get().DEFAULT_TIMEOUT),
        )
        context = self.context
        assert context is not None
        context.state = state
        w = Watched(self, attempt.work, job, state)
        w.loop = self.side.loop
        w.task = self  # type: ignore[assignment]  # the watchdog calls our cancel()
        self._inner = asyncio.current_task()
        self.side.watchdog.watch(w)
        try:
            runner = attempt.runner
            assert runner is not None  # (a run performs a registered job only: run.py)
            arun = getattr(runner, "arun", None)
            result = arun() if arun is not None else runner()
            if inspect.isawaitable(result):
                result = await result
            attempt.returned = result  # the job's own (kept as its result)
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
            run.claim(self, attempt)

    def refuse(self) -> None:
        assert self.context is not None
        self.context.abandoned = True

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
        """Settle a run that ignores its interruption (run.abandon), and give its slot
        back: the coroutine may run on, but settles nothing."""
        if work is not self.attempt.work or not run.abandon(self, self.attempt, exc):
            return False
        self.side.free_threadsafe(self)
        return True


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
