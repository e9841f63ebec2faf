"""Reliable fetch's job source: one feeder thread per process fetches for the processor
threads, several jobs and every pending ack per round trip.

The processor threads never touch Redis to get work. A thread that comes free hands in
the job it finished (to ack) and waits on the ready queue; the feeder collects what the
threads handed in and, in one round trip (lua/fetch.lua), acks every finished job and
moves one job for each thread then free into this process's in-progress list, then puts
those jobs on the ready queue. While a fetch is out, threads that come free meanwhile
are counted, and the next fetch, sent as soon as this one returns, carries their acks
and asks for their jobs: under load a round trip carries as many jobs as threads came
free during the last one.

Why this shape (docs/performance.md "The run layer"):

- Jobs are fetched only for threads that are free at the moment the fetch is sent, so no
  job waits behind a slow one: the ready queue never holds more jobs than there are
  threads waiting for one.
- An ack leaves with the next fetch, and a fetch is sent as soon as the one in flight
  returns: an ack waits at most one fetch round trip, so the window in which a crash can
  re-run a finished job stays one round trip. At shutdown the acks still waiting are
  flushed (:meth:`Dispatcher.flush`) before the hand-over.
- One fetch in flight, from one thread: the processor threads hand jobs in and take
  them out through C-implemented queues (no Python-level lock or condition per job),
  and a drain makes a fraction of the fetches it made when each thread fetched for
  itself, each carrying more jobs. On a worker bound by its interpreter lock that CPU is
  the throughput.
- When the queues run dry the feeder polls with a backoff (from ``IDLE_FIRST_PAUSE`` up
  to ``FETCH_IDLE_MAX_INTERVAL``), but an ack handed in is sent at once; while Redis is
  away it backs off from ``IDLE_FIRST_PAUSE`` up to ``ERROR_MAX_PAUSE`` and reports the
  outage once (errors.report); the acks a failed fetch carried stay pending in the record
  for the heartbeat to send.

Jobs fetched but not yet taken are on the in-progress list like any other: the shutdown
hand-over requeues them, and the heartbeat's reconcile counts them as known
(:meth:`Dispatcher.known`).

The dispatcher owns the record's side of acks: a finished job handed in stays *running*
in the record until the fetch carrying its ack returns (then it is settled), or, if that
fetch fails, is left *pending* for the heartbeat to ack.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Protocol

from .. import connection, errors
from .record import ACK, Control, Record, Work

log = logging.getLogger("cogworker_django")


class _Nudge:
    """Handed in by :meth:`Dispatcher.nudge` (not a thread that came free)."""


NUDGE = _Nudge()

# How often a waiting thread, and the feeder while it has nothing to do, re-check quiet
# and stop.
WAIT_SLICE = 0.25
# First pause after a fetch that failed or found nothing; doubles up to its cap
# (FETCH_IDLE_MAX_INTERVAL for an empty queue, ERROR_MAX_PAUSE while Redis is away).
IDLE_FIRST_PAUSE = 0.02
ERROR_MAX_PAUSE = 2.0
# With every thread busy and no async job in the last fetch, how often the feeder asks
# for jobs for the event loop anyway (Dispatcher._wanted): about the longest an async
# job queued behind plain ones waits to be found while the threads are all busy. Long
# enough that a plain load (no async job coming) rarely takes a job it can't start.
PROBE_PAUSE = 5.0
# A feeder loop that raised (a bug, never an outage: those are caught and reported)
# starts again after this pause; its state (threads waiting, acks) is kept.
RESTART_PAUSE = 1.0


class BatchFetch(Protocol):
    """What the dispatcher needs of its strategy (fetch.ReliableFetch)."""

    def fetch_many(self, conn: Any, acks: list[str], count: int) -> list[Work]: ...

    def ack(self, conn: Any, raw: str) -> None: ...


class Dispatcher:
    """The processor threads' side (:meth:`next`, :meth:`release`, :meth:`give_back`),
    the feeder thread's (:meth:`start`, :meth:`join`), and what the heartbeat and the
    shutdown read (:meth:`known`, :meth:`flush`)."""

    def __init__(
        self, strategy: BatchFetch, record: Record, control: Control, concurrency: int
    ) -> None:
        self.strategy = strategy
        self.record = record
        self.control = control
        self.concurrency = concurrency
        # Threads -> feeder: one item per thread that came free (the job it finished, to
        # ack, or None). Feeder -> threads: the jobs fetched for them.
        self._handed_in: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ready: queue.SimpleQueue[Work] = queue.SimpleQueue()
        # Fetched and not yet taken by a thread (id -> work): the heartbeat's "known".
        # Plain dict operations, atomic under the interpreter lock.
        self._fetched: dict[int, Work] = {}
        # The feeder's state, kept across a restart of its loop.
        self._wanting = 0  # threads that came free and have no job on its way
        self._acks: list[Work] = []
        self._thread: threading.Thread | None = None
        self._link = connection.Held()  # the feeder's own connection
        # The event loop's side (aio.AsyncSide, set by the manager): its free slots are
        # asked for with the threads', and the async jobs a fetch brings go to it. Each
        # turn of the loop hands in the slots that came free as an aio.Freed (with the
        # jobs to ack).
        self.aio: Any = None
        self._aio_free = 0  # the loop's free slots with no job on its way
        self._aio_coming = False  # the last fetch that brought jobs brought an async one
        self._probe_at = 0.0  # (monotonic) no probe for an async job before this
        self._in_fetch = False
        self._nudged = False  # (nudge: fetch now, the idle pause is over)
        # How many fetches went out and how many jobs and acks they carried (for tests
        # and the performance notes; never read on the hot path).
        self.fetches = 0
        self.fetched_jobs = 0
        self.acks_sent = 0

    def nudge(self) -> None:
        """Jobs were just put on the queues (the limiter waker moved waiting jobs): if
        the feeder is pausing because the queues ran dry, it fetches now instead."""
        self._handed_in.put(NUDGE)

    # The processor threads' side ----------------------------------------------------------

    def next(self, conn: Any, done: Work | None) -> Work | None:
        """Hand in ``done`` (a finished job to ack) and wait for the next job; None once
        the process is quiet (the caller leaves its loop)."""
        self._handed_in.put(done)
        control, ready = self.control, self._ready
        while not control.stopping.is_set():
            try:
                work = ready.get(timeout=WAIT_SLICE)
            except queue.Empty:
                if control.quiet.is_set():
                    return None
                continue
            self._fetched.pop(id(work), None)
            return work
        return None  # jobs fetched but not taken stay listed: the hand-over requeues them

    def hand_in(self, freed: Any) -> None:
        """The event loop's side: slots came free (an aio.Freed, with the jobs to ack)."""
        self._handed_in.put(freed)

    def release(self, conn: Any, done: Work) -> None:
        """A thread leaving its loop with a finished job: ack it alone now (if that fails
        it stays pending for the heartbeat or the hand-over)."""
        try:
            self.strategy.ack(conn, done.raw)
        except Exception as exc:  # noqa: BLE001 - stays pending for the heartbeat/shutdown
            errors.report("Ack", exc)
        else:
            self.record.settled(done.raw, ACK)
        self.record.finished(done)

    def give_back(self, work: Work) -> bool:
        """A job taken as the process stops: not run, kept listed (and known) for the
        hand-over to requeue."""
        self._fetched[id(work)] = work
        return True

    # What the heartbeat and the shutdown read ---------------------------------------------

    def known(self) -> set[str]:
        """Jobs fetched and not yet taken by a thread or started on the event loop
        (known to this process)."""
        known = {w.raw for w in self._fetched.copy().values()}
        if self.aio is not None:
            known |= self.aio.known()
        return known

    def attach_loop(self, aio: Any) -> None:
        """Fetch for the event loop's slots too (before :meth:`start`)."""
        self.aio = aio
        self._aio_free = aio.capacity

    def flush(self, conn: Any) -> None:
        """At shutdown, once the feeder has stopped: send the acks still waiting (raises on
        failure; the hand-over then drops them from the list, as pending acks)."""
        self._collect()
        acks, self._acks = self._acks, []
        if not acks:
            return
        try:
            self.strategy.fetch_many(conn, [a.raw for a in acks], 0)
        finally:
            for work in acks:
                self.record.finished(work)
        for work in acks:
            self.record.settled(work.raw, ACK)

    # The feeder thread --------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the feeder to stop (it stops once the process is
        stopping and no fetch of its is out); True when it was inside a fetch when this
        was called (what that fetch took after the hand-over needs a second pass)."""
        thread = self._thread
        if thread is None:
            return False
        was_fetching = self._in_fetch
        thread.join(timeout)
        return was_fetching or thread.is_alive()

    def _run(self) -> None:
        try:
            while not self.control.stopping.is_set():
                try:
                    self._feed()
                except BaseException as exc:  # noqa: BLE001 - a bug must not stop every thread
                    log.error("the feeder failed: %s", errors.describe(exc), exc_info=exc)
                    self.control.stopping.wait(RESTART_PAUSE)
        finally:
            self._link.close()

    def _feed(self) -> None:
        control = self.control
        idle_pause = error_pause = IDLE_FIRST_PAUSE
        not_before = 0.0  # no fetch for jobs before this (the queues ran dry)
        error_until = 0.0  # no fetch at all before this (Redis away)
        while not control.stopping.is_set():
            now = time.monotonic()
            wanted = self._wanted()
            if now < error_until:
                until = error_until  # Redis was away: not before the pause is over
            elif self._nudged:  # jobs were just queued: the idle pause is over
                self._nudged = False
                not_before, idle_pause = 0.0, IDLE_FIRST_PAUSE
                continue
            elif self._acks or (wanted and now >= not_before):
                until = now  # send now
            elif wanted:
                until = not_before  # the queues ran dry: poll after the pause
            else:
                until = now + WAIT_SLICE  # every thread is busy: wait for one
            if until > now:
                try:
                    self._take_in(self._handed_in.get(timeout=min(WAIT_SLICE, until - now)))
                except queue.Empty:
                    pass
                continue
            self._collect()
            wanted = self._wanted()
            began = time.monotonic()
            try:
                got = self._fetch(wanted)
            except Exception as exc:  # noqa: BLE001 - Redis away: back off, report once
                errors.report("Fetch", exc, began=began)
                error_until = time.monotonic() + error_pause
                error_pause = min(error_pause * 2, ERROR_MAX_PAUSE)
                continue
            error_pause = IDLE_FIRST_PAUSE
            error_until = 0.0
            if wanted and got < wanted:
                # The queues ran dry: poll again after a pause (doubling), unless a thread
                # hands in an ack meanwhile (it goes at once, asking for jobs too).
                not_before = time.monotonic() + idle_pause
                idle_pause = min(idle_pause * 2, control.idle_max)
            elif got:
                idle_pause = IDLE_FIRST_PAUSE
                not_before = 0.0

    def _wanted(self) -> int:
        """Jobs to ask for: one per thread free with none on its way (none once quiet)."""
        if self.control.quiet.is_set():
            return 0
        threads = min(self._wanting, self.concurrency)
        if self.aio is None:
            return threads
        # The loop's free slots are asked for while async jobs are coming (the last
        # fetch that brought jobs brought one); a fetch can't choose a job's side, and
        # asking for them under a plain load would take plain jobs that then wait for a
        # thread here, while another process may have one free. A job fetched for one
        # side that needs the other waits there for a thread or slot, counted against
        # what is asked for next (a negative count): no more jobs wait in this process
        # than it has room for.
        if self._aio_coming:
            return max(0, threads + self._aio_free)
        if threads <= 0 and self._aio_free > 0 and time.monotonic() >= self._probe_at:
            # Every thread busy: now and then, jobs for the loop anyway, so that async
            # jobs queued behind plain ones are found. The plain jobs such a fetch brings
            # wait here for a thread: never more of them than the process has threads.
            return max(0, min(self.concurrency + threads, self._aio_free))
        return max(0, threads)

    def _take_in(self, done: Any) -> None:
        if isinstance(done, _Nudge):
            self._nudged = True
            return
        if type(done) is not Work and done is not None:  # an aio.Freed: loop slots
            self._aio_free += done.slots
            self._acks.extend(done.works)
            return
        self._wanting += 1
        if done is not None:
            self._acks.append(done)

    def _collect(self) -> None:
        """Take in everything the threads handed in so far, without waiting."""
        get = self._handed_in.get_nowait
        while True:
            try:
                done = get()
            except queue.Empty:
                return
            self._take_in(done)

    def _fetch(self, wanted: int) -> int:
        """One round trip: every ack waiting, and up to ``wanted`` jobs onto the ready
        queue; returns how many came."""
        acks, self._acks = self._acks, []
        self._in_fetch = True
        try:
            works = self.strategy.fetch_many(self._link, [a.raw for a in acks], wanted)
        except BaseException:
            for work in acks:
                self.record.finished(work)  # its ack stays pending: the heartbeat's to retry
            raise
        finally:
            self._in_fetch = False
        errors.recovered("Fetch")  # (logged before any job this fetch took can start)
        before = self.fetched_jobs
        self.fetches += 1
        self.fetched_jobs += len(works)
        self.acks_sent += len(acks)
        fetched, ready = self._fetched, self._ready
        if self.aio is not None and works:
            works = self._to_loop(works)
        for work in works:
            fetched[id(work)] = work  # known before a thread can take it
            ready.put(work)
        self._wanting -= len(works)
        for work in acks:
            self.record.settled(work.raw, ACK)
            self.record.finished(work)
        return self.fetched_jobs - before

    def _to_loop(self, works: list[Work]) -> list[Work]:
        """Hand the async jobs among ``works`` to the event loop; returns the others."""
        aio = self.aio
        plain: list[Work] = []
        loop_jobs = []
        for work in works:
            job = aio.sort(work)
            if job is None:
                plain.append(work)
            else:
                loop_jobs.append((work, job))
        self._aio_coming = bool(loop_jobs)
        if loop_jobs:
            self._aio_free -= len(loop_jobs)
            aio.submit(loop_jobs)
        else:
            self._probe_at = time.monotonic() + PROBE_PAUSE
        return plain
