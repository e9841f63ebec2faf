"""One processor thread: take a job from the job source, run it (worker/run.py), take
the next.

Duties:
- ask the job source for the next job (reliable fetch: the ack of the last one, in the
  ledger, rides with the next fetch of any thread: dispatch.py);
- drive the run (:func:`run.steps`): the server chain and the job function under the
  watchdog (timeouts.py), the Redis work of its settlement on this thread;
- back off while Redis is away or every queue is empty, and notice quiet within a
  second or two.

Its collaborators come in through the constructor (the ledger, the fetch strategy, the
job source, the run control, the watchdog); its death is reported to ``on_death``,
which replaces the thread. A run the watchdog abandons is settled by :func:`run.abandon`
on the watchdog's side (:meth:`Processor.abandon_run`); this thread, if the job ever
returns, leaves its loop having settled nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections

from ..core import jobs, locks, middleware, payload, progress
from ..store import connection, errors
from ..store.codec import wire
from . import run
from .dispatch import ERROR_MAX_PAUSE, IDLE_FIRST_PAUSE
from .jobsource import JobSource, Settles
from .ledger import Control, Ledger, Work
from .timeouts import Watchdog

log = logging.getLogger("cogworker_django")


class RunChain:
    """One processor's server chain, with each run's links chosen once, before the run,
    from what the middleware declare (middleware.py): a built-in that has nothing to do
    for a run is not in its chain at all (no frame, no closure), instead of being called
    to pass it through. Inactive ones (history off, no metrics or OTEL) are dropped once
    here; the others by the payload fields they act on, and the run log by the log level
    at the run's start. The order of what is left never changes, and the user's
    middleware (``user``, innermost) is in every chain, whatever attributes it has. The
    chosen chains are kept per combination (a handful per process: plain jobs, unique
    ones, batch members).
    """

    def __init__(self, builtin: tuple[Any, ...], user: tuple[Any, ...] = ()) -> None:
        builtin = tuple(m for m in builtin if getattr(m, "active", True))
        self.full = builtin + tuple(user)
        self._fields = frozenset(
            f for m in builtin for f in (getattr(m, "payload_fields", None) or ())
        )
        self._selective = len(builtin)  # only the built-ins are ever left out
        self._dynamic = tuple(i for i, m in enumerate(builtin) if hasattr(m, "active_now"))
        self._chosen: dict[tuple[frozenset[str], tuple[bool, ...]], tuple[Any, ...]] = {}
        self._none: frozenset[str] = frozenset()

    def links(self, job: dict[str, Any]) -> tuple[Any, ...]:
        """The middleware a run of ``job`` passes through, outermost first."""
        present = job.keys() & self._fields
        fields = frozenset(f for f in present if job[f]) if present else self._none
        full = self.full
        key = (fields, tuple(full[i].active_now() for i in self._dynamic))
        chosen = self._chosen.get(key)
        if chosen is None:
            chosen = self._chosen[key] = self._choose(fields, key[1])
        return chosen

    def _choose(self, fields: frozenset[str], now: tuple[bool, ...]) -> tuple[Any, ...]:
        inactive = {i for i, active in zip(self._dynamic, now, strict=True) if not active}
        chosen = []
        for i, m in enumerate(self.full):
            if i < self._selective:
                wanted = getattr(m, "payload_fields", None)
                if wanted is not None and not fields.intersection(wanted):
                    continue
                if i in inactive:
                    continue
            chosen.append(m)
        return tuple(chosen)


def advance(gen: Any, answer: Any, error: BaseException | None) -> Any:
    """The next effect a run (:func:`run.steps`) yields after ``answer`` (or ``error``,
    thrown in), or None once it is over. Both drivers step a run with it."""
    try:
        return gen.send(answer) if error is None else gen.throw(error)
    except StopIteration:
        return None


class Processor:
    def __init__(
        self,
        index: int,
        *,
        ledger: Ledger,
        strategy: Settles,
        source: JobSource,
        control: Control,
        on_death: Callable[[Processor, BaseException], None],
        chain: RunChain,
        watchdog: Watchdog | None = None,
    ) -> None:
        self.index = index
        self.name = f"processor-{index}"
        self.ledger = ledger
        self.strategy = strategy
        self.source = source
        self.control = control
        self.on_death = on_death
        self.watchdog = watchdog
        self.thread: threading.Thread | None = None
        self._attempt: run.Attempt | None = None  # the run in progress
        # Set by the watchdog when it settled this thread's run for it: the thread leaves
        # its loop as soon as (if ever) the job returns, and settles nothing.
        self.abandoned = False
        self.stopped = False  # (a thread is never cancelled by the stop: run.Driver)
        self._chain = chain  # its own: RunChain keeps the chains it chose

    @property
    def busy(self) -> bool:
        return self._attempt is not None and not self.abandoned

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    # The loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - reported; the pool replaces the thread
            self.on_death(self, exc)

    def _loop(self) -> None:
        control, source = self.control, self.source
        conn = connection.get_client()
        error_pause = IDLE_FIRST_PAUSE
        while not control.quiet.is_set() and not self.abandoned:
            began = time.monotonic()
            try:
                work = source.next(conn)
            except Exception as exc:  # noqa: BLE001 - Redis away: back off (acks stay in the ledger)
                errors.report("Fetch", exc, began=began)
                control.quiet.wait(error_pause)
                error_pause = min(error_pause * 2, ERROR_MAX_PAUSE)
                continue
            error_pause = IDLE_FIRST_PAUSE
            if work is None:
                continue  # quiet (reliable fetch), or nothing came in a blocking wait (basic)
            if control.stopping.is_set() and source.give_back(work):
                continue  # a fetch that returned after the stop began: the hand-over's
            self.process(work)

    # One job -----------------------------------------------------------------------------

    def process(self, work: Work) -> None:
        """Run one job to its settlement (or its leaving: worker/run.py)."""
        # The run's own dict: current_job() gives it, with progress() (core/progress.py).
        job = progress.RunningJob(payload.decode(wire(work.raw), work.queue))
        runner = jobs.resolve(job) if job["func"] != payload.UNPARSEABLE else None
        attempt = run.Attempt(work, job, runner)
        self.ledger.start(work, self.name)
        self._attempt = attempt
        locks.set_run_abandoned(False)
        try:
            with jobs.running(job, runner):  # the current job for the whole run
                steps = run.steps(self, attempt)
                effect = advance(steps, None, None)
                while effect is not None:
                    effect = advance(steps, *self._do(effect))
        except BaseException:  # a bug in the run layer: this thread dies (and is replaced)
            if not attempt.abandoned:
                self.ledger.forget(work)  # the reconcile requeues its job
            raise
        finally:
            locks.set_run_abandoned(False)
            if not attempt.abandoned:
                self._attempt = None

    def _do(self, effect: run.Perform | run.Call) -> tuple[Any, BaseException | None]:
        try:
            if isinstance(effect, run.Perform):
                self._chain_and_job(effect.attempt)
                return None, None
            return effect.fn(*effect.args), None
        except BaseException as exc:  # noqa: BLE001 - thrown into the run: its outcome
            return None, exc

    def _chain_and_job(self, attempt: run.Attempt) -> None:
        job = attempt.job
        close_old_connections()
        try:
            links = self._chain.links(job)
            if links:
                middleware.run_server_chain(
                    links, job, attempt.work.queue, lambda: self._perform(attempt)
                )
            else:
                self._perform(attempt)
        finally:
            close_old_connections()

    def _perform(self, attempt: run.Attempt) -> Any:
        """The innermost link of the server chain: the job itself, then the claim of its
        settlement, before any middleware acts on the outcome (releases a lock, say)."""
        try:
            if self.watchdog is None:
                value = jobs.perform(attempt.job, attempt.runner)
            else:
                # The job is this thread's current one already (process: jobs.running).
                value = self.watchdog.run(self, attempt.work, attempt.job, attempt.runner)
            attempt.returned = value  # the job's own (a middleware's answer may differ)
            return value
        finally:
            run.claim(self, attempt)

    def refuse(self) -> None:
        locks.set_run_abandoned(True)

    # Abandonment (called on the watchdog's side, never on this thread) --------------------

    def abandon_run(self, work: Work, exc: BaseException) -> bool:
        attempt = self._attempt
        if attempt is None or attempt.work is not work:
            return False
        if not run.abandon(self, attempt, exc):
            return False
        self.abandoned = True
        return True
