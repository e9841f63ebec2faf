"""One processor thread: take a job, run the server middleware chain and the job, settle.

(Over 400 lines: a run's duties from the fetch to the settlement, in the order they
happen; the async side reuses its Settler.)

Duties:
- ask the job source for the next job, handing in the one just finished (reliable fetch
  acks it with the next fetch of any thread: dispatch.py);
- run only registered jobs: anything else goes to dead and is never imported or called;
  the job is resolved once per run;
- settle: success is acked (counted in memory); a failure is filed in retry or dead and
  acked in one script (the fetch strategy's ``file``); what cannot be settled now is
  left in the record for the heartbeat (never lost, never run again);
- back off while Redis is away or every queue is empty, and notice quiet within a
  second or two.

Its collaborators come in through the constructor (the record, the fetch strategy, the
job source, the run control, the work board, the watchdog); its death is reported to
``on_death``, which replaces the thread.

Job controls: an expired job is dropped before the chain (never run); the job function
runs under the watchdog (its time limit, cancellation: timeouts.py); a run that ends
with ``JobCancelled`` is dropped, not retried. A run the watchdog abandons is settled
by :meth:`Processor.abandon_run` on the watchdog's side; this thread, if the job ever
returns, leaves its loop having settled nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections

from .. import history
from ..controls import expiry, limits
from ..controls.errors import JobCancelled, JobExpired, timeout_behind
from ..core import departures, jobs, locks, middleware, payload, progress, results, staleness
from ..core.retry import Discard
from ..observe import stats, telemetry
from ..store import connection, errors, keys
from ..store.codec import wire
from . import failures
from .dispatch import ERROR_MAX_PAUSE, IDLE_FIRST_PAUSE
from .record import ACK, Control, Filing, Record, Work, WorkBoard

log = logging.getLogger("cogworker_django")


class Dropped:
    """The outcome of a run that leaves without a retry: expired before it ran,
    cancelled, or discarded by the job. Acked like a success; the job's locks and
    listeners let go; ``status`` and ``error_class`` are what its kept result says."""

    def __init__(self, reason: str, status: str = "cancelled", error_class: str = "") -> None:
        self.reason = reason
        self.status = status
        self.error_class = error_class

    def ended(self, job: dict[str, Any]) -> results.Ended | None:
        return kept(job, self.status, error=(self.error_class, self.reason, ""))


def kept(job: dict[str, Any], status: str, **outcome: Any) -> results.Ended | None:
    """What a run keeps of its outcome (results.ended); never raises: a result that can't
    be built is logged and the run settles without it (rule 4)."""
    try:
        return results.ended(job, status, **outcome)
    except Exception as exc:  # noqa: BLE001 - the settlement goes on without it
        log.error(
            "%s (jid %s): its result could not be kept: %s",
            job.get("func"),
            job.get("jid"),
            errors.describe(exc),
        )
        return None


def dropped_for(exc: BaseException) -> Dropped:
    """A run the job cancelled or discarded itself (JobCancelled, Discard)."""
    if isinstance(exc, Discard):
        return Dropped(
            f"discarded: {errors.safe_str(exc.reason, 500)}",
            "discarded",
            "cogworker_django.Discard",
        )
    return Dropped(
        f"cancelled while running: {errors.safe_str(exc, 500)}",
        "cancelled",
        payload.error_class(exc),
    )


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


class Settler:
    """How a run is filed when it does not simply succeed: expired, failed, filed for a
    stuck run by the watchdog. Shared by the processor threads and the event loop's runs
    (worker/aio_run.py), which have ``record``, ``strategy``, ``board``, ``name``,
    ``busy``, ``abandoned`` and ``_job_of_run`` alike."""

    record: Record
    strategy: Any
    board: WorkBoard
    name: str
    busy: bool
    abandoned: bool
    _job_of_run: dict[str, Any] | None
    _on_filed: Callable[[str, bool], Any] | None  # a Reschedule's (limiters): around the filing
    _returned: Any = None  # what the job function returned (kept as its result)

    @staticmethod
    def _expired(job: dict[str, Any], queue: str, now: float) -> Dropped:
        late = now - float(job["expires_at"])
        reason = f"expired: not started by its expires_at ({late:.1f} s ago); never run"
        log.warning("%s (jid %s) %s", job["func"], job["jid"], reason)
        telemetry.record_outcome(job, queue, "expired")
        if history.enabled():
            run = history.capture(job, queue, now, 0.0, JobExpired(reason))
            errors.best_effort(history.COMPONENT, lambda: history.buffer.add(run))
        return Dropped(reason, "expired", payload.error_class(JobExpired(reason)))

    def _ended_of(self, job: dict[str, Any], target: str) -> results.Ended | None:
        """What a failed run filed in ``target`` keeps (none for a reschedule)."""
        if target == "schedule":
            return None
        status = "retrying" if target == "retry" else "dead"
        return kept(job, status, error=results.error_of(job))

    def _failed(self, job: dict[str, Any], exc: BaseException) -> tuple[str, float]:
        # A finally that raised while a timeout unwound the job: filed as the timeout.
        exc = timeout_behind(exc)
        if locks.run_abandoned():
            # Its settlement went to another (the watchdog filed the job, or the hand-over
            # requeued it): the failure is theirs to count and log, once.
            return "dead", time.time()
        try:
            target, score = failures.after_failure(job, exc)
        except Exception as err:  # noqa: BLE001 - the failure path never kills the thread
            # (a thread that dies here leaves the job listed, requeued, failing forever)
            log.error(
                "%s (jid %s): its failure could not be counted (%s): filed in dead",
                job.get("func"),
                job.get("jid"),
                errors.describe(err),
                exc_info=True,
            )
            return "dead", time.time()
        log.warning(
            "%s (jid %s) failed: %s -> %s", job["func"], job["jid"], errors.describe(exc), target
        )
        if target == "retry" and not locks.run_abandoned():
            # The wait until the retry, plus a minute for the poller to move it.
            locks.extend_job_locks(job, score - time.time() + 60)
        return target, score

    def _file(self, work: Work, filing: Filing, job: dict[str, Any]) -> None:
        """File a failed (or rescheduled) job and ack it in one script, with the outcome
        it keeps; if Redis can't take it now, the record keeps both for the heartbeat."""
        on_filed = self._on_filed if filing.target == "schedule" else None
        if on_filed is not None:
            errors.best_effort("Reschedule", lambda: on_filed(filing.payload, False))
        ended = self._ended_of(job, filing.target)
        try:
            self.strategy.file(connection.get_client(), work.raw, filing, ended)
        except Exception as exc:  # noqa: BLE001
            errors.report("Settle", exc, f"{job['func']} (jid {job['jid']}) kept to file later")
            self.record.settle_later(work.raw, filing, ended)
            return
        errors.recovered("Settle")  # (the heartbeat's retries recover it too)
        self._on_filed = None
        if on_filed is not None:
            errors.best_effort("Reschedule", lambda: on_filed(filing.payload, True))

    # Abandonment (called on the watchdog's side, never on this thread) --------------------

    def abandon_run(self, work: Work, exc: BaseException) -> bool:
        """Settle the run this thread is stuck in, for it (rule 15): False when the run
        claimed its own settlement first (it is not stuck after all). From True on, this thread is
        refused its claim: it acks, files and releases nothing if the job returns."""
        if not self.record.abandon(work):
            return False
        self.abandoned = True
        self.busy = False
        self.board.finished(self.name)
        job = payload.decode(wire(work.raw), work.queue)  # as fetched: the thread's is in use
        try:
            if self._job_of_run is not None:
                # Its body is still inside: the leases stay held until it returns.
                limits.keep_for_abandoned_run(id(self._job_of_run))
            self._settle_abandoned(work, job, exc)
        finally:
            self.record.settlement_done(work)
            self.record.release_abandoned(work)
        return True

    def _settle_abandoned(self, work: Work, job: dict[str, Any], exc: BaseException) -> None:
        queue = work.queue
        status = "cancelled" if isinstance(exc, JobCancelled) else "timeout"
        telemetry.record_outcome(job, queue, status)
        if history.enabled():
            run = history.capture(job, queue, time.time(), 0.0, exc)
            errors.best_effort(history.COMPONENT, lambda: history.buffer.add(run))
        if isinstance(exc, JobCancelled):
            dropped = dropped_for(exc)
            departures.job_left(job, dropped.reason)
            errors.best_effort(
                "Cancel", lambda: connection.get_client().zrem(keys.cancels(), job["jid"])
            )
            ended = dropped.ended(job)
            try:
                self.strategy.ack(connection.get_client(), work.raw, ended)
            except Exception as err:  # noqa: BLE001 - the heartbeat acks it later
                errors.report("Ack", err)
                self.record.settle_later(work.raw, ACK, ended)
            return
        target, score = self._failed(job, exc)
        if target == "dead":
            departures.job_left(job, f"dead: {errors.safe_str(exc, 500)}")
        stats.counters.incr("failed")
        self._file(work, failures.filing_for(work, job, target, score), job)


class Processor(Settler):
    def __init__(
        self,
        index: int,
        *,
        record: Record,
        strategy: Any,
        source: Any,
        control: Control,
        board: WorkBoard,
        on_death: Callable[[Processor, BaseException], None],
        chain: RunChain,
        watchdog: Any = None,
    ) -> None:
        self.index = index
        self.name = f"processor-{index}"
        self.record = record
        self.strategy = strategy
        self.source = source
        self.control = control
        self.board = board
        self.on_death = on_death
        self.watchdog = watchdog
        self.thread: threading.Thread | None = None
        self.busy = False
        # Set by the watchdog when it settled this thread's run for it: the thread leaves
        # its loop as soon as (if ever) the job returns, and settles nothing.
        self.abandoned = False
        self._performing: Work | None = None
        self._job_of_run: dict[str, Any] | None = None  # the run's job dict (its leases' key)
        self._on_filed: Callable[[str, bool], Any] | None = None  # a Reschedule's (limiters)
        self._chain = chain  # its own: RunChain keeps the chains it chose

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
        done: Work | None = None
        error_pause = IDLE_FIRST_PAUSE
        while not control.quiet.is_set() and not self.abandoned:
            began = time.monotonic()
            try:
                handed, done = done, None  # the source owns it from here (acks it)
                work = source.next(conn, handed)
            except Exception as exc:  # noqa: BLE001 - Redis away: back off (acks stay pending)
                errors.report("Fetch", exc, began=began)
                control.quiet.wait(error_pause)
                error_pause = min(error_pause * 2, ERROR_MAX_PAUSE)
                continue
            error_pause = IDLE_FIRST_PAUSE
            if work is None:
                continue  # quiet (reliable fetch), or nothing came in a blocking wait (basic)
            if control.stopping.is_set() and source.give_back(work):
                continue  # a fetch that returned after the stop began: the hand-over's
            done = self.process(work)
        if done is not None and not self.abandoned:
            source.release(conn, done)

    # One job -----------------------------------------------------------------------------

    def process(self, work: Work) -> Work | None:
        """Run one job and settle it; returns the work still to ack (after a success).
        That one stays *running* in the record until the fetch carrying its ack returns,
        so the heartbeat never acks it too (a second LREM could take the list entry of
        another copy of the same payload, still running)."""
        record = self.record
        # The run's own dict: current_job() gives it, with progress() (core/results.py).
        job = progress.RunningJob(payload.decode(wire(work.raw), work.queue))
        runner = jobs.resolve(job) if job["func"] != payload.UNPARSEABLE else None
        self._job_of_run = job
        self._on_filed = None
        self._returned = None
        record.started(work)
        self.source.taken(work)  # after the record has it: known all along
        self.busy = True
        self.board.started(self.name, work)
        locks.set_run_abandoned(False)
        self._performing = work
        ack_later = False
        try:
            with jobs.running(job, runner):  # the current job for the whole run
                ack_later = self._run_and_settle(work, job, runner)
        finally:
            locks.set_run_abandoned(False)
            if self.abandoned:
                record.left(work)  # the board and busy flag are its replacement's now
                ack_later = False
            else:
                self.board.finished(self.name)
                self.busy = False
                if not ack_later:
                    record.finished(work)
            self._job_of_run = None
        return work if ack_later else None

    def _run_and_settle(self, work: Work, job: dict[str, Any], runner: Any) -> bool:
        """True when the run succeeded and its ack is left to the source."""
        try:
            outcome = self._execute(job, work, runner)
        finally:
            self._end_perform(work)  # (unless perform was never reached)
        if locks.run_abandoned():
            if self.abandoned:
                log.warning(
                    "%s (jid %s) came back from its job after the watchdog abandoned it: "
                    "already filed, nothing settled again",
                    job["func"],
                    job["jid"],
                )
            else:
                log.warning(
                    "%s (jid %s) finished after the shutdown hand-over requeued it: "
                    "left to its requeued copy",
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
                departures.job_left(job, outcome.reason)  # locks, task result, batch
                self.record.settle_later(work.raw, ACK, outcome.ended(job))
                return True
            target, score = outcome
            if target != "schedule":
                stats.counters.incr("failed")
            self._file(work, failures.filing_for(work, job, target, score), job)
            return False
        finally:
            self.record.settlement_done(work)

    def _perform(self, job: dict[str, Any], work: Work, runner: Any) -> Any:
        """The innermost link of the server chain: the job itself, then the claim of its
        settlement, before any middleware acts on the outcome (releases a lock, say)."""
        try:
            if self.watchdog is None:
                value = jobs.perform(job, runner)
            else:
                # The job is this thread's current one already (process: jobs.running).
                value = self.watchdog.run(self, work, job, runner)
            self._returned = value  # the job's own (a middleware's answer may differ)
            return value
        finally:
            self._end_perform(work)

    def _end_perform(self, work: Work) -> None:
        """Once per run: it is no longer performing (the heartbeat stops refreshing its
        locks), and it claims its settlement. Refused once the shutdown hand-over has
        begun: the run is abandoned to its requeued copy (record.py)."""
        if self._performing is not work:
            return
        self._performing = None
        self.record.performed(work)
        if not self.record.claim_settlement(work):
            locks.set_run_abandoned(True)

    def _execute(
        self, job: dict[str, Any], work: Work, runner: Any
    ) -> tuple[str, float] | Dropped | None:
        """None on success, Dropped, else (target set, score) with ``job`` updated in
        place."""
        queue = work.queue
        if job["func"] == payload.UNPARSEABLE:
            log.error(
                "unparseable payload on queue %s: filed in dead (%s)",
                queue,
                job.get("error_message"),
            )
            return "dead", time.time()
        if runner is None:
            log.error("%s (jid %s) is not a registered job: filed in dead", job["func"], job["jid"])
            locks.release_job_locks(job)
            return failures.to_dead(job, "NotRegistered", staleness.not_registered(job["func"]))
        now = time.time()
        if expiry.expired(job, now):
            return self._expired(job, queue, now)
        close_old_connections()
        try:
            links = self._chain.links(job)
            if links:
                middleware.run_server_chain(
                    links, job, queue, lambda: self._perform(job, work, runner)
                )
            else:
                self._perform(job, work, runner)
            return None
        except middleware.Reschedule as r:
            self._on_filed = r.on_filed
            return "schedule", time.time() + failures.reschedule_delay(r)
        except JobCancelled as exc:
            log.warning("%s (jid %s) cancelled: %s", job["func"], job["jid"], errors.describe(exc))
            errors.best_effort(
                "Cancel", lambda: connection.get_client().zrem(keys.cancels(), job["jid"])
            )
            return dropped_for(exc)
        except Discard as exc:
            log.info("%s (jid %s) discarded: %s", job["func"], job["jid"], exc.reason)
            return dropped_for(exc)
        except Exception as exc:  # noqa: BLE001 - every failure is filed
            return self._failed(job, exc)
        except BaseException as exc:  # noqa: BLE001 - SystemExit (or any BaseException)
            # raised by a job is its failure. Even KeyboardInterrupt: signals reach only
            # the main thread, so here it can only come from the job; re-raised, it would
            # kill this thread and leave the job to be re-run, killing the next one too.
            return self._failed(job, exc)
        finally:
            close_old_connections()
