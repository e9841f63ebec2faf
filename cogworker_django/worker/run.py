"""One run of one job, written once for its two drivers: a processor thread
(worker/processor.py, plain jobs) and the event loop (worker/aio_run.py, ``async def``
jobs).

:func:`steps` is the whole run as a generator: every decision (not registered, expired,
a middleware's reschedule, a cancel, a discard, a failure and where it is filed) and
every bookkeeping step (the ledger's transitions, counters, history of a job dropped
before it ran) is here. What differs by driver it yields, and the driver answers:

- :class:`Perform`: run the server chain and the job function under the watchdog, and
  claim the run's settlement at the function's end (innermost, before any middleware
  acts on the outcome): a thread calls it, the loop awaits it; the job's exception is
  thrown back into the generator;
- :class:`Call`: a call that touches Redis or the database (filing a failure, releasing
  locks, a job's departure): a thread makes it itself, the loop on a helper thread, never
  on the loop every async job shares.

Abandonment (the watchdog settling a run stuck where no exception reaches) is here too
(:func:`abandon`), called on the watchdog's side for either driver.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from .. import history
from ..controls import expiry, limits
from ..controls.errors import JobCancelled, JobExpired, timeout_behind
from ..core import departures, locks, middleware, payload, progress, results, staleness
from ..core.retry import Discard
from ..observe import stats, telemetry
from ..store import connection, errors, keys
from ..store.codec import wire
from . import failures
from .jobsource import Settles
from .ledger import ABANDONED, FENCED, Filing, Ledger, Work

log = logging.getLogger("cogworker_django")


@dataclass(frozen=True, slots=True)
class Perform:
    """Run the server chain and the job; the answer is ignored (the value is the
    attempt's ``returned``), an exception is the job's (or a middleware's) outcome."""

    attempt: Attempt


@dataclass(frozen=True, slots=True)
class Call:
    """``fn(*args)``: Redis or database work of the run's settlement."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]


class Driver(Protocol):
    """What a run needs of whoever drives it (a processor thread, an async run)."""

    name: str
    ledger: Ledger
    strategy: Settles  # the fetch strategy (worker/fetch.py)
    stopped: bool  # cancelled by the stop (an async run's): its leaving is told elsewhere

    def refuse(self) -> None:
        """The run was refused its claim: from here what the run's code asks of
        ``locks.run_abandoned()`` is True (a thread-local, or the async run's context)."""


class Attempt:
    """One run's own state, shared by its steps and its driver."""

    __slots__ = ("work", "job", "runner", "returned", "on_filed", "abandoned")

    def __init__(
        self, work: Work, job: progress.RunningJob, runner: Callable[[], Any] | None
    ) -> None:
        self.work = work
        self.job = job  # current_job() is this dict
        self.runner = runner  # what jobs.resolve made of it (None: nothing registered)
        self.returned: Any = None  # what the job function returned (kept as its result)
        self.on_filed: Callable[[str, bool], Any] | None = None  # a Reschedule's (limiters)
        # Set by the watchdog when it settled this run for its driver: the driver
        # settles nothing should the job ever return.
        self.abandoned = False


class Dropped:
    """The outcome of a run that leaves without a retry: expired before it ran,
    cancelled, or discarded by the job. Acked like a success; the job's locks and
    listeners let go; ``status`` and ``error_class`` are what its kept result says."""

    def __init__(self, reason: str, status: str, error_class: str) -> None:
        self.reason, self.status, self.error_class = reason, status, error_class

    def ended(self, job: dict[str, Any]) -> results.Ended | None:
        return kept(job, self.status, error=(self.error_class, self.reason, ""))


Outcome = tuple[str, float] | Dropped | None  # None: succeeded; (target set, score)


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


def ended_of(job: dict[str, Any], target: str) -> results.Ended | None:
    """What a failed run filed in ``target`` keeps (none for a reschedule)."""
    if target == "schedule":
        return None
    return kept(job, "retrying" if target == "retry" else "dead", error=results.error_of(job))


# The run -------------------------------------------------------------------------------------


def steps(driver: Driver, attempt: Attempt) -> Generator[Perform | Call, Any, None]:
    """The whole run of ``attempt`` (begun in the ledger by its driver), to its
    settlement or its leaving."""
    work, job = attempt.work, attempt.job
    try:
        outcome = yield from _execute(attempt)
    finally:
        claimed = claim(driver, attempt)  # (a run that never reached the job claims here)
    if not claimed:
        if attempt.abandoned:
            log.warning(
                "%s (jid %s) came back from its job after the watchdog abandoned it: "
                "already filed, nothing settled again",
                job["func"],
                job["jid"],
            )
        elif work.state == FENCED:
            log.warning(
                "%s (jid %s) finished after this process was taken for dead: left to its "
                "recovered copy, nothing settled",
                job["func"],
                job["jid"],
            )
        elif work.state != ABANDONED and not driver.stopped:
            # (The stop's own cancellations are told in one line: aio.cancel_running.)
            log.warning(
                "%s (jid %s) finished after the shutdown hand-over requeued it: left to its "
                "requeued copy",
                job["func"],
                job["jid"],
            )
        return
    ledger = driver.ledger
    if outcome is None:
        stats.incr("processed")
        ledger.succeeded(work, kept(job, "succeeded", value=attempt.returned))
        return
    if isinstance(outcome, Dropped):
        yield Call(departures.job_left, (job, outcome.reason))  # locks, task result, batch
        ledger.succeeded(work, outcome.ended(job))
        return
    target, score = outcome
    if target != "schedule":
        stats.incr("failed")
    filing = failures.filing_for(work, job, target, score)
    yield Call(file, (driver, attempt, filing))


def _execute(attempt: Attempt) -> Generator[Perform | Call, Any, Outcome]:
    """None on success, Dropped, else (target set, score) with the job updated in place."""
    work, job, runner = attempt.work, attempt.job, attempt.runner
    queue = work.queue
    if job["func"] == payload.UNPARSEABLE:
        log.error(
            "unparseable payload on queue %s: filed in dead (%s)", queue, job.get("error_message")
        )
        return "dead", time.time()
    if runner is None:
        log.error("%s (jid %s) is not a registered job: filed in dead", job["func"], job["jid"])
        yield Call(locks.release_job_locks, (job,))
        return failures.to_dead(job, "NotRegistered", staleness.not_registered(job["func"]))
    now = time.time()
    if expiry.expired(job, now):
        return expired(job, queue, now)
    try:
        yield Perform(attempt)
        return None
    except middleware.Reschedule as r:
        attempt.on_filed = r.on_filed
        return "schedule", time.time() + failures.reschedule_delay(r)
    except JobCancelled as exc:
        log.warning("%s (jid %s) cancelled: %s", job["func"], job["jid"], errors.describe(exc))
        yield Call(forget_cancel, (job["jid"],))
        return dropped_for(exc)
    except Discard as exc:
        log.info("%s (jid %s) discarded: %s", job["func"], job["jid"], exc.reason)
        return dropped_for(exc)
    except GeneratorExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure is filed
        # SystemExit and KeyboardInterrupt raised by a job are its failures: signals reach
        # only the main thread, so here they can only come from the job; re-raised, one
        # would kill its runner and leave the job to be re-run, killing the next one too.
        failed_at: tuple[str, float] = yield Call(failed, (job, exc))
        return failed_at


def claim(driver: Driver, attempt: Attempt) -> bool:
    """Once per run, at the job function's end: it claims its settlement (ledger.performed).
    Refused once the shutdown hand-over has begun (the run is abandoned to its requeued
    copy: nothing it holds is released) or when the watchdog settled it."""
    claimed = driver.ledger.performed(attempt.work)
    if not claimed:
        driver.refuse()
    return claimed


def expired(job: dict[str, Any], queue: str, now: float) -> Dropped:
    late = now - float(job["expires_at"])
    reason = f"expired: not started by its expires_at ({late:.1f} s ago); never run"
    log.warning("%s (jid %s) %s", job["func"], job["jid"], reason)
    telemetry.record_outcome(job, queue, "expired")
    if history.enabled():
        run = history.capture(job, queue, now, 0.0, JobExpired(reason))
        errors.best_effort(history.COMPONENT, lambda: history.buffer.add(run))
    return Dropped(reason, "expired", payload.error_class(JobExpired(reason)))


def failed(job: dict[str, Any], exc: BaseException) -> tuple[str, float]:
    """Count a failure and say where it goes (the job's retry control decides); never
    raises: a failure path that raised would leave the job listed, requeued, failing
    forever."""
    # A finally that raised while a timeout unwound the job: filed as the timeout.
    exc = timeout_behind(exc)
    if locks.run_abandoned():
        # Its settlement went to another (the watchdog filed the job, or the hand-over
        # requeued it): the failure is theirs to count and log, once.
        return "dead", time.time()
    try:
        target, score = failures.after_failure(job, exc)
    except Exception as err:  # noqa: BLE001 - the failure path never kills the runner
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


def file(driver: Driver, attempt: Attempt, filing: Filing) -> None:
    """File a failed (or rescheduled) job and ack it in one script, with the outcome it
    keeps; if Redis can't take it now, the ledger keeps both for the heartbeat."""
    work, job = attempt.work, attempt.job
    on_filed = attempt.on_filed if filing.target == "schedule" else None
    if on_filed is not None:
        errors.best_effort("Reschedule", lambda: on_filed(filing.payload, False))
    ended = ended_of(job, filing.target)
    try:
        driver.strategy.file(connection.get_client(), work.raw, filing, ended)
    except Exception as exc:  # noqa: BLE001
        errors.report("Settle", exc, f"{job['func']} (jid {job['jid']}) kept to file later")
        driver.ledger.file_later(work, filing, ended)
        return
    errors.recovered("Settle")  # (the heartbeat's retries recover it too)
    driver.ledger.settled(work)
    if on_filed is not None:
        errors.best_effort("Reschedule", lambda: on_filed(filing.payload, True))


def forget_cancel(jid: str) -> None:
    errors.best_effort("Cancel", lambda: connection.get_client().zrem(keys.cancels(), jid))


# Abandonment (on the watchdog's side, never the driver's) -------------------------------------


def abandon(driver: Driver, attempt: Attempt, exc: BaseException) -> bool:
    """Settle the run its driver is stuck in, for it (rule 15): False when the run
    claimed its own settlement first (it is not stuck after all). From True on, the
    driver is refused its claim: it acks, files and releases nothing if the job
    returns."""
    work = attempt.work
    if not driver.ledger.abandon(work):
        return False
    attempt.abandoned = True
    job = payload.decode(wire(work.raw), work.queue)  # as fetched: the run's is in use
    # Its body is still inside: the leases stay held until it returns.
    limits.keep_for_abandoned_run(id(attempt.job))
    queue = work.queue
    status = "cancelled" if isinstance(exc, JobCancelled) else "timeout"
    telemetry.record_outcome(job, queue, status)
    if history.enabled():
        run = history.capture(job, queue, time.time(), 0.0, exc)
        errors.best_effort(history.COMPONENT, lambda: history.buffer.add(run))
    if isinstance(exc, JobCancelled):
        dropped = dropped_for(exc)
        departures.job_left(job, dropped.reason)
        forget_cancel(job["jid"])
        ended = dropped.ended(job)
        try:
            driver.strategy.ack(connection.get_client(), work.raw, ended)
        except Exception as err:  # noqa: BLE001 - the heartbeat acks it later
            errors.report("Ack", err)
            driver.ledger.ack_later(work, ended)
        else:
            driver.ledger.settled(work)
        return True
    target, score = failed(job, exc)
    if target == "dead":
        departures.job_left(job, f"dead: {errors.safe_str(exc, 500)}")
    stats.incr("failed")
    stand_in = Attempt(work, progress.RunningJob(job), None)
    file(driver, stand_in, failures.filing_for(work, job, target, score))
    return True
