"""One processor thread: fetch, run the server middleware chain and the job, settle.

Duties:
- fetch the next job, acking the one just finished in the same round trip;
- run only registered jobs: anything else goes to dead and is never imported or called;
- settle: success is acked (counted in memory); a failure is filed in retry or dead and
  acked in one script; what cannot be settled now is left in the record for the
  heartbeat (never lost, never run again);
- back off while Redis is away or every queue is empty, and notice quiet within a
  second or two.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections
from django.utils.module_loading import import_string

from .. import conf, connection, errors, jobs, keys, locks, middleware, payload, scripts, stats
from . import failures
from .fetch import Work, wire
from .record import ACK, Filing

if TYPE_CHECKING:
    from .manager import Manager

log = logging.getLogger("cogworker_django")

# Built into every worker's server chain, outermost first; user middleware runs inside.
BUILTIN_SERVER_MIDDLEWARE = (
    "cogworker_django.history.HistoryMiddleware",  # first: it times everything inside
    "cogworker_django.telemetry.TelemetryMiddleware",  # worker metrics, the run's trace span
    "cogworker_django.unique.UniqueMiddleware",
    "cogworker_django.periodic.running_lock.RunningLockMiddleware",
    "cogworker_django.djtasks.middleware.TaskResultMiddleware",  # django.tasks results, signals
)
# First pause after a fetch that failed or found nothing; doubles up to its cap.
IDLE_FIRST_PAUSE = 0.02
ERROR_MAX_PAUSE = 2.0


def server_chain() -> tuple[Any, ...]:
    builtin = tuple(import_string(p)() for p in BUILTIN_SERVER_MIDDLEWARE)
    return builtin + middleware.server_middleware()


class Processor:
    def __init__(self, manager: Manager, index: int) -> None:
        self.manager = manager
        self.index = index
        self.name = f"processor-{index}"
        self.thread: threading.Thread | None = None
        self.busy = False
        self._performing: Work | None = None
        self._chain = server_chain()

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    # The loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - logged; the manager replaces the thread
            if not self.manager.quieted:
                log.error("%s died: %s", self.name, errors.describe(exc), exc_info=True)

    def _loop(self) -> None:
        manager, fetcher = self.manager, self.manager.fetcher
        conn = connection.get_client()
        done: Work | None = None
        idle_pause = IDLE_FIRST_PAUSE
        error_pause = IDLE_FIRST_PAUSE
        dispatcher = manager.dispatcher  # reliable fetch: shared by the threads (dispatch.py)
        while not manager.quieted:
            try:
                if dispatcher is not None:
                    work = dispatcher.next(conn, done)
                    done = None  # handed in: acked with the next fetch of any thread
                else:
                    work = fetcher.fetch(conn, ack=done)
            except Exception as exc:  # noqa: BLE001 - Redis away: back off, keep the ack pending
                errors.report("Fetch", exc)
                if done is not None:
                    manager.record.finished(done)  # its ack is the heartbeat's to retry now
                done = None
                manager.wait_quiet(error_pause)
                error_pause = min(error_pause * 2, ERROR_MAX_PAUSE)
                continue
            if done is not None:
                manager.record.settled(done.raw, ACK)
                manager.record.finished(done)
                done = None
            error_pause = IDLE_FIRST_PAUSE
            errors.recovered("Fetch")
            if work is None:
                if not fetcher.blocking:
                    manager.wait_quiet(idle_pause)
                    idle_pause = min(idle_pause * 2, manager.idle_max)
                continue
            idle_pause = IDLE_FIRST_PAUSE
            if manager.stopping and dispatcher is not None:
                dispatcher.give_back(work)  # a fetch that returned after the stop began
                continue
            done = self.process(work)
        if done is not None:
            self._ack_alone(conn, done)

    def _ack_alone(self, conn: Any, work: Work) -> None:
        try:
            self.manager.fetcher.ack(conn, work.raw)
        except Exception as exc:  # noqa: BLE001 - stays pending for the heartbeat/shutdown
            errors.report("Ack", exc)
        else:
            self.manager.record.settled(work.raw, ACK)
        self.manager.record.finished(work)

    # One job -----------------------------------------------------------------------------

    def process(self, work: Work) -> Work | None:
        """Run one job and settle it; returns the work still to ack (after a success).
        That one stays *running* in the record until the fetch carrying its ack returns,
        so the heartbeat never acks it too (a second LREM could take the list entry of
        another copy of the same payload, still running)."""
        record = self.manager.record
        ack_later = False
        job = payload.decode(wire(work.raw), work.queue)
        record.started(work)
        self.busy = True
        self.manager.work_started(self.name, work)
        locks.set_run_abandoned(False)
        self._performing = work
        current = jobs.running(job)  # the current job for the whole run, middleware too
        current.__enter__()
        try:
            try:
                outcome = self._execute(job, work)
            finally:
                self._end_perform(work)  # (unless perform was never reached)
            if locks.run_abandoned():
                log.warning(
                    "%s (jid %s) finished after the shutdown hand-over requeued it: "
                    "left to its requeued copy",
                    job["func"],
                    job["jid"],
                )
                return None
            try:
                if outcome is None:
                    stats.counters.incr("processed")
                    record.settle_later(work.raw, ACK)
                    ack_later = True
                    return work
                target, score = outcome
                if target != "schedule":
                    stats.counters.incr("failed")
                self._file(work, filing_for(work, job, target, score), job)
                return None
            finally:
                record.settlement_done(work)
        finally:
            current.__exit__(None, None, None)
            locks.set_run_abandoned(False)
            self.manager.work_finished(self.name)
            self.busy = False
            if not ack_later:
                record.finished(work)

    def _perform(self, job: dict[str, Any], work: Work) -> Any:
        """The innermost link of the server chain: the job itself, then the claim of its
        settlement, before any middleware acts on the outcome (releases a lock, say)."""
        try:
            return jobs.perform(job)
        finally:
            self._end_perform(work)

    def _end_perform(self, work: Work) -> None:
        """Once per run: it is no longer performing (the heartbeat stops refreshing its
        locks), and it claims its settlement. Refused once the shutdown hand-over has
        begun: the run is abandoned to its requeued copy (record.py)."""
        if self._performing is not work:
            return
        self._performing = None
        record = self.manager.record
        record.performed(work)
        if not record.claim_settlement(work):
            locks.set_run_abandoned(True)

    def _execute(self, job: dict[str, Any], work: Work) -> tuple[str, float] | None:
        """None on success, else (target set, score) with ``job`` updated in place."""
        queue = work.queue
        if job["func"] == payload.UNPARSEABLE:
            log.error(
                "unparseable payload on queue %s: filed in dead (%s)",
                queue,
                job.get("error_message"),
            )
            return "dead", time.time()
        if jobs.resolve(job) is None:
            log.error("%s (jid %s) is not a registered job: filed in dead", job["func"], job["jid"])
            locks.release_job_locks(job)
            return failures.to_dead(
                job,
                "NotRegistered",
                f"{job['func']!r} is not a registered job; it was not imported or run",
            )
        close_old_connections()
        try:
            middleware.run_server_chain(self._chain, job, queue, lambda: self._perform(job, work))
            return None
        except middleware.Reschedule as r:
            return "schedule", time.time() + reschedule_delay(r)
        except Exception as exc:  # noqa: BLE001 - every failure is filed
            return self._failed(job, exc)
        except BaseException as exc:  # noqa: BLE001 - SystemExit (or any BaseException)
            # raised by a job is its failure. Even KeyboardInterrupt: signals reach only
            # the main thread, so here it can only come from the job; re-raised, it would
            # kill this thread and leave the job to be re-run, killing the next one too.
            return self._failed(job, exc)
        finally:
            close_old_connections()

    def _failed(self, job: dict[str, Any], exc: BaseException) -> tuple[str, float]:
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
        """File a failed (or rescheduled) job and ack it in one script; if Redis can't
        take it now, the record keeps it for the heartbeat."""
        try:
            file_job(connection.get_client(), self.manager.fetcher.settle_key(), work.raw, filing)
        except Exception as exc:  # noqa: BLE001
            errors.report("Settle", exc, f"{job['func']} (jid {job['jid']}) kept to file later")
            self.manager.record.settle_later(work.raw, filing)
            return
        errors.recovered("Settle")  # (the heartbeat's retries recover it too)


def reschedule_delay(r: middleware.Reschedule) -> float:
    """A middleware's Reschedule delay, or UNIQUE_RESCHEDULE_DELAY when it is not a finite
    number >= 0 (a NaN score can't be filed; an infinite one would never come due)."""
    try:
        delay = float(r.delay)
    except (TypeError, ValueError, OverflowError):
        delay = math.nan
    if math.isfinite(delay) and delay >= 0:
        return delay
    log.error("Reschedule(delay=%r) is not a usable delay: rescheduled with the default", r.delay)
    return conf.get().UNIQUE_RESCHEDULE_DELAY


def filing_for(work: Work, job: dict[str, Any], target: str, score: float) -> Filing:
    """The filing of a failed job; never raises. A job a middleware left holding values
    JSON can't take is filed in dead with its payload as it was fetched."""
    try:
        return Filing(target, score, payload.encode(job))
    except Exception as exc:  # noqa: BLE001 - the failure path never kills the thread
        log.error(
            "%s (jid %s) can't be encoded after its run (%s): filed in dead as fetched",
            job.get("func"),
            job.get("jid"),
            errors.describe(exc),
        )
        wrapper = payload.unparseable(
            wire(work.raw), work.queue, "UnencodableAfterRun", errors.describe(exc)
        )
        if isinstance(job.get("jid"), str):
            wrapper["jid"] = job["jid"]
        return Filing("dead", time.time(), payload.encode(wrapper))


def file_job(conn: Any, inprogress_key: str, raw: str, filing: Filing) -> None:
    """File ``filing`` and ack ``raw`` in one script. Filed even when the job is no
    longer listed: a Redis that lost its data (a restart without persistence, a
    failover) lost the list too, and this filing is then the job's only trace."""
    target_key = {"retry": keys.retry(), "dead": keys.dead(), "schedule": keys.schedule()}[
        filing.target
    ]
    min_score, keep = conf.dead_trim()
    scripts.run(
        "settle",
        conn,
        [inprogress_key, target_key],
        [
            wire(raw),
            repr(filing.score),
            filing.payload,
            filing.target if filing.target == "dead" else "",
            repr(min_score),
            keep,
        ],
    )
