"""Reliable fetch's job source: the thread that comes free fetches its next job itself,
for every other thread free at that moment too, several jobs and every pending ack per
round trip; a feeder thread fetches for the threads that find no fetch to send.

(Over 400 lines: every change of the state under the dispatcher's one lock (the threads'
own fetches, the feeder's, the event loop's hand-in) is in this file, so its invariants
are checked in one read.)

A processor thread that comes free hands in the job it finished (to ack). If fewer than
``fetches_out`` fetches are out (two with ``SECOND_FETCH_FROM`` threads or more, else
one) and the queues were not found empty lately, it sends a
fetch itself, on a free connection of the dispatcher's: in one round trip
(lua/fetch.lua) it acks every finished job handed in so far and moves one job for itself
and one for each thread waiting that no fetch out has asked for into this process's
in-progress list; it runs the first and puts the others on the ready queue. If every
fetch is out (or the queues ran dry, or Redis is away), it waits on the ready queue, and
the feeder, told when a fetch comes back, sends the next one with the acks of every
thread that came free meanwhile and asks for their jobs: under load a round trip carries
as many jobs as threads came free while the others were out.

Why this shape (docs/performance.md "The run layer"):

- A thread that sends its own fetch gets its job with no hand-off at all: no wake-up of
  another thread and none of its own (each wake-up is a switch of the interpreter lock,
  and with a hundred threads these convoy). A second fetch out lets a thread that comes
  free during a fetch (nearly always, with a hundred threads, as a round trip waits for
  the interpreter lock behind them) send its own instead of waiting to be woken.
- Jobs are fetched only for threads that are free at the moment the fetch is sent, so no
  job waits behind a slow one: the ready queue never holds more jobs than there are
  threads waiting for one.
- At most ``fetches_out`` fetches out, each on its own connection (``connection.Held``):
  an ack leaves with the fetch it was handed in before, or the next, sent as soon as
  one out returns, so the window in which a crash can re-run a finished job stays
  about one fetch round trip. Each fetch asks only for jobs no fetch out has asked
  for (``_coming_plain``, ``_coming_async``), so two never fetch for the same free thread. At shutdown the acks still waiting are flushed
  (:meth:`Dispatcher.flush`) before the hand-over.
- When a fetch finds the queues dry, nobody polls them: the feeder waits on their
  doorbells (store/bell.py: a BRPOP on a connection of its own, up to
  ``FETCH_IDLE_MAX_INTERVAL``), which a push that finds its queue empty rings, and
  fetches as soon as one rings (a job pushed into an idle worker starts within a round
  trip or two, docs/workers.md "Pickup latency"). Meanwhile a thread that comes free
  still sends its own fetch, to carry its ack at once; the loop's hand-in, a nudge and
  a stop end the wait early (``connection.Held.interrupt``). A feeder woken by a ring
  whose fetch filled every free thread rings again: more jobs may wait, for the next
  idle worker. While Redis is away it backs off from ``IDLE_FIRST_PAUSE`` up to
  ``ERROR_MAX_PAUSE`` and reports the outage once (errors.report); the acks a failed
  fetch carried stay PENDING in the ledger for the heartbeat to send.

Every job a fetch brings is in the ledger (worker/ledger.py) from the fetch's return,
FETCHED until its thread or loop slot starts it: the shutdown hand-over requeues it if
none does, and the heartbeat's reconcile knows it. A fetch that returns after the stop
began starts nothing; one that returns after the process went quiet starts nothing
either, and the feeder puts its jobs back on their queues at once. The acks are the
ledger's too: a finished job waits there (ACK) until a fetch carries its ack (ACKING),
and leaves it when that fetch returns, or is left PENDING for the heartbeat to ack if
that fetch fails.

The dispatcher only schedules: its state (the threads waiting, the jobs asked for by the
fetches out, the free connections, the event loop's free slots, the backoffs) is kept
under one lock, held only to read and change it, never across a round trip.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, NamedTuple

from ..store import connection, errors
from .background import Background
from .jobsource import BatchFetch
from .kinds import Kinds, joined_paths
from .ledger import Control, Ledger, Work

log = logging.getLogger("cogworker_django")

# How often the feeder, while it has nothing to do, re-checks quiet and stop.
WAIT_SLICE = 0.25
# How often a thread waiting for a job re-checks them: a quiet or a stop wakes it at once
# (wake_waiting), so this is only a safety net; short, it woke every idle thread four
# times a second for nothing (400 wake-ups a second at -c 100).
THREAD_WAIT = 5.0
# With no async job in the last fetch that brought jobs, how often a fetch asks for jobs
# for the event loop's free slots anyway: the longest an async job queued behind plain
# ones on another queue waits to be found while no thread comes free. A fetch takes
# async jobs only for those slots (lua/fetch.lua, by the async jobs' paths), so a probe
# costs one fetch; where kinds can't be told apart (only django.tasks tasks on the
# loop) it may take plain jobs that then wait for a thread, so it is rarer there.
ASYNC_PROBE = 1.0
PROBE_PAUSE = 5.0
# A fetch that left jobs of a kind with no room (and found none of the other kind): the
# next goes when a thread or a loop slot comes free, or after this at the latest (a job
# of the other kind pushed onto another queue meanwhile rings no bell the feeder waits on).
BLOCKED_RECHECK = 0.05
# First pause after a fetch that failed; doubles up to ERROR_MAX_PAUSE while Redis is away.
IDLE_FIRST_PAUSE = 0.02
ERROR_MAX_PAUSE = 2.0
# Fetches out at once, each on a connection of its own: with many threads a thread that
# comes free while one is out sends the second for itself instead of waiting to be
# woken. Measured (docs/performance.md "The run layer"): two gave about 10% more jobs/s
# than one with a hundred threads that wait, and about 10% fewer with ten threads on
# INCR jobs, where one fetch already serves several threads and a second one only
# splits them. So two from SECOND_FETCH_FROM threads on, else one.
FETCHES_OUT = 2
SECOND_FETCH_FROM = 50


def _since(link: Any, began: float) -> float:
    """When a failed fetch's attempt began, for the outage report: no later than when
    its connection was taken. With two connections, one can still hold a socket from
    before an outage the other has already seen end; its failure on first use after
    that is not a second outage (errors.report drops an attempt older than the last
    recovery). A real one is reported by the next attempt, on a fresh connection."""
    opened = link.opened_at
    return began if opened is None else min(began, opened)


# What Dispatcher._claim returns when jobs are wanted and the queues ran dry.
IDLE = object()


class Wants(NamedTuple):
    """Jobs a fetch asks for: for threads free with none on its way (``plain``) and for
    the event loop's free slots (``async_``)."""

    plain: int
    async_: int

    @property
    def total(self) -> int:
        return self.plain + self.async_


NOTHING = Wants(0, 0)


def _ends(acks: list[Work]) -> list[Any]:
    """The outcomes the acked runs keep (core/results.py): written with their acks."""
    return [w.ended for w in acks if w.ended is not None]


class Dispatcher:
    """The processor threads' side (:meth:`next`, :meth:`give_back`), the feeder
    thread's (:meth:`start`, :meth:`join`), the event loop's (:meth:`hand_in`), and the
    shutdown's (:meth:`flush`)."""

    def __init__(
        self,
        strategy: BatchFetch,
        ledger: Ledger,
        control: Control,
        concurrency: int,
        fetches_out: int | None = None,
    ) -> None:
        self.strategy = strategy
        self.ledger = ledger
        self.control = control
        self.concurrency = concurrency
        if fetches_out is None:
            fetches_out = FETCHES_OUT if concurrency >= SECOND_FETCH_FROM else 1
        self.fetches_out = fetches_out
        self._lock = threading.Lock()
        # Fetched for waiting threads, not yet taken (a C queue: no Python-level lock or
        # condition per job), and the feeder's wake-ups (a fetch came back with
        # work to do, an ack to send, a nudge).
        # A None in it is a wake-up (quiet or stop): the waiting threads look at once.
        self._ready: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._freed: queue.SimpleQueue[Any] = queue.SimpleQueue()  # the loop's (hand_in)
        # Plain jobs a fetch brought back after the process went quiet, for the feeder to
        # put back on their queues (:meth:`_give_back_stranded`; under the lock).
        self._stranded: list[Work] = []
        # Under the lock:
        self._wanting = 0  # threads free with no job on its way (waiting or fetching)
        # Jobs asked for by the fetches out, for threads and for the loop.
        self._coming_plain = 0
        self._coming_async = 0
        # The queues ran dry: no fetch but those carrying acks until a doorbell rings
        # (or the wait on them ends). Only a fetch sent after the last wake-up
        # (``_dry_from`` and later, by number) may set it: one sent before the ring
        # found the queues as they were before the push that rang.
        self._dry = False
        # ... because a queue's next job had no room (not empty): no wait on the doorbells
        # then (a thread, a loop slot coming free ends it; a stall is cut at _recheck_at).
        self._blocked = False
        self._recheck_at = 0.0
        self._dry_from = 0
        self._awaiting = False  # the feeder is in its BRPOP on the doorbells
        self._rang = False  # the last wait ended on a ring: pass it on if the fetch fills
        self._bell_link = connection.Held()  # the feeder's own, for its blocking wait
        self._error_until = 0.0  # (monotonic) Redis was away: no fetch before this
        self._error_pause = IDLE_FIRST_PAUSE
        self._feeder = Feeder(self)
        # One connection per fetch out; the free ones (under the lock).
        self._links = [connection.Held() for _ in range(fetches_out)]
        self._free_links = list(self._links)
        # The feeder has exited (under the lock): a link coming back from a fetch is
        # closed by the thread that brings it back, never while another thread reads it.
        self._links_closed = False
        # Fetches are numbered (under the lock): the ledger knows the ones out by number.
        self._sent = 0
        # The event loop's side (aio.AsyncSide, set by the manager): its free slots are
        # asked for with the threads', and the async jobs a fetch brings go to it. Each
        # turn of the loop hands in the slots that came free as an aio.Freed (with the
        # jobs to ack).
        self.aio: Any = None
        self._aio_free = 0  # the loop's free slots with no job on its way
        # The async jobs' paths, for a fetch to take jobs by kind (lua/fetch.lua); empty
        # when only django.tasks tasks run on the loop (their kind is in their task).
        self._paths = ""
        # The last fetch that brought jobs brought an async one, or left one for want of a
        # slot: the loop's free slots are asked for (else only now and then, _probe_at).
        self._aio_coming = False
        self._probe_at = 0.0
        # How many fetches went out (and by processor threads), and how many jobs and
        # acks they carried (for tests and the performance notes; never read on the hot
        # path).
        self.fetches = 0
        self.own_fetches = 0
        self.fetched_jobs = 0
        self.acks_sent = 0

    def wake_waiting(self) -> None:
        """The process went quiet (or is stopping): every thread waiting for a job, and
        the feeder, look now rather than at the end of their wait (THREAD_WAIT,
        WAIT_SLICE: a stop of an idle worker waited that long for its threads)."""
        for _ in range(self.concurrency):
            self._ready.put(None)
        self._wake.put(None)
        self._end_idle_wait()

    def nudge(self) -> None:
        """Jobs were just put on the queues (the limiter waker moved waiting jobs): if
        the feeder is waiting on the doorbells, it fetches now instead."""
        self._end_idle_wait()
        self._wake.put(None)

    def _end_idle_wait(self) -> None:
        """The feeder's wait on the doorbells (if it is in one) ends now; it fetches."""
        with self._lock:
            self._dry = False
            if self._awaiting:
                self._bell_link.interrupt()

    # The processor threads' side ----------------------------------------------------------

    def next(self, conn: Any) -> Work | None:
        """The next job (the acks waiting in the ledger go with the fetch that brings
        it): fetched by this thread when a connection is free, else waited for; None once
        the process is quiet (the caller leaves its loop)."""
        control = self.control
        with self._lock:
            self._wanting += 1
            now = time.monotonic()
            if self._dry and self._blocked:  # room for a job a fetch had to leave
                self._dry = False
            own = (
                bool(self._free_links)
                and not self._links_closed  # the feeder exited: it may be closing them
                and (not self._dry or self.ledger.has_acks())  # dry: only to carry acks
                and now >= self._error_until
                and not control.quiet.is_set()
            )
            if own:
                link, number = self._take_link()
                acks = self.ledger.take_acks()
                wanted = self._wanted()
                self._asked(wanted)
            elif self._free_links:
                self._wake.put(None)  # the feeder's to fetch (an ack goes at once)
        if own:
            work = self._own_fetch(link, number, acks, wanted)
            if work is not None:
                return work
        return self._wait()

    def _wait(self) -> Work | None:
        control, ready = self.control, self._ready
        while not control.stopping.is_set():
            try:
                work = ready.get(timeout=THREAD_WAIT)
            except queue.Empty:
                work = None
            if work is None:  # the wait passed, or a wake-up (wake_waiting)
                if control.quiet.is_set():
                    return None
                continue
            return work  # FETCHED in the ledger until its thread starts it
        return None  # jobs fetched but not taken stay listed: the hand-over requeues them

    def _own_fetch(self, link: Any, number: int, acks: list[Work], wanted: Wants) -> Work | None:
        """This thread sends a fetch on ``link``: one round trip for it and the threads
        waiting that no fetch out asked for; its own job, or None (it then waits like
        the others)."""
        began = time.monotonic()
        try:
            works = self._round_trip(link, number, acks, wanted)
        except Exception as exc:  # noqa: BLE001 - Redis away: the feeder backs off and retries
            errors.report("Fetch", exc, began=_since(link, began))
            with self._lock:
                self._failed()
                self._done_with(link, wanted)
            self._wake.put(None)
            return None
        except BaseException:  # not an outage: the thread leaves (its pool replaces it)
            with self._lock:
                self._wanting -= 1
                self._done_with(link, wanted)
            self._wake.put(None)
            raise
        with self._lock:
            self.own_fetches += 1
            self._done_with(link, wanted)
            plain = self._hand_out(works, wanted, keep=1, number=number)
            more = self.ledger.has_acks() or (self._wanted().total and not self._dry)
        if more:
            self._wake.put(None)  # threads came free during the fetch: the feeder's turn
        return plain

    def hand_in(self, freed: Any) -> None:
        """The event loop's side: slots came free (an aio.Freed; their acks wait in the
        ledger). Never waits: the loop that every async job shares doesn't take the
        dispatcher's lock (its holder may itself be waiting for the interpreter lock
        behind a hundred threads); the feeder, woken, takes the slots in
        (:meth:`_take_freed`)."""
        self._freed.put(freed)
        self._wake.put(None)
        if self._dry and not self._blocked:  # (read without the lock: a stale look
            self._end_idle_wait()  # costs one wait's end) the acks go now

    def _take_freed(self) -> None:
        """(Under the lock.) What the event loop handed in so far."""
        get = self._freed.get_nowait
        while True:
            try:
                freed = get()
            except queue.Empty:
                return
            self._aio_free += freed.slots
            if freed.slots and self._blocked:
                self._dry = False  # room for a job a fetch had to leave

    def give_back(self, work: Work) -> bool:
        """A job taken as the process stops: not run, kept listed (and FETCHED in the
        ledger) for the hand-over to requeue."""
        return True

    def attach_loop(self, aio: Any) -> None:
        """Fetch for the event loop's slots too (before :meth:`start`)."""
        self.aio = aio
        self._aio_free = aio.capacity
        self._paths = joined_paths(aio.sorter.paths)

    def flush(self, conn: Any) -> None:
        """At shutdown, once the feeder has stopped: send the acks still waiting (raises on
        failure; the hand-over then drops them from the list, as pending acks)."""
        with self._lock:
            self._take_freed()
        acks = self.ledger.take_acks()
        if not acks:
            return
        try:
            self.strategy.fetch_many(conn, [a.raw for a in acks], 0, _ends(acks))
        except BaseException:
            self.ledger.acks_failed(acks)
            raise
        self.ledger.acks_sent(acks)

    # The feeder thread --------------------------------------------------------------------

    def start(self) -> None:
        self._feeder.start()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the feeder to stop (it stops once the process is
        stopping and no fetch of its is out); True when a fetch (the feeder's or a
        processor thread's) was out when this was called (what it took after the
        hand-over needs a second pass)."""
        was_fetching = len(self._free_links) < self.fetches_out
        self._wake.put(None)
        self._end_idle_wait()
        return not self._feeder.join(timeout) or was_fetching

    def feed_once(self) -> float | None:
        """(The feeder thread.) One turn: a fetch, or the seconds to wait for the next."""
        control = self.control
        if control.stopping.is_set():
            self._feeder.stop()
            return None
        if control.quiet.is_set() and time.monotonic() >= self._error_until:
            self._give_back_stranded()  # (while Redis is away, at the fetches' pace)
        claimed = self._claim()
        if claimed is IDLE:
            self._await_bell()
            return 0.0
        if isinstance(claimed, float):
            return max(0.0, claimed - time.monotonic())
        assert isinstance(claimed, tuple)
        link, number, acks, wanted = claimed
        rang, self._rang = self._rang, False
        began = time.monotonic()
        try:
            works = self._round_trip(link, number, acks, wanted)
        except Exception as exc:  # noqa: BLE001 - Redis away: back off, report once
            errors.report("Fetch", exc, began=_since(link, began))
            with self._lock:
                self._failed()
                self._done_with(link, wanted)
            return 0.0
        except BaseException:
            with self._lock:
                self._done_with(link, wanted)  # (the thread goes on without it)
            raise
        with self._lock:
            self._done_with(link, wanted)
            self._hand_out(works, wanted, keep=0, number=number)
        filled = len(works) >= wanted.total or getattr(works, "blocked", False)
        if rang and wanted.total and filled:
            self.strategy.ring()  # more may wait: the next idle worker's turn
        return 0.0

    def _await_bell(self) -> None:
        """(The feeder, the queues dry.) Wait on the doorbells for up to
        FETCH_IDLE_MAX_INTERVAL, or until :meth:`_end_idle_wait`; the next fetch goes
        then. One BRPOP waits FETCH_BLOCK_SECONDS at most (the socket's timeout is longer
        than that): a longer wait is several in turn."""
        bells = self.strategy.bells()
        deadline = time.monotonic() + self.control.idle_max
        rang = False
        while not rang:
            wait = min(deadline - time.monotonic(), connection.FETCH_BLOCK_SECONDS)
            with self._lock:
                if not self._dry or self.control.quiet.is_set():
                    break
                self._awaiting = wait >= IDLE_FIRST_PAUSE and bool(bells)
                if not self._awaiting:
                    break
            try:
                rang = self._bell_link.execute_command("BRPOP", *bells, wait) is not None
            except Exception:  # noqa: BLE001 - ended early (interrupt), or Redis away:
                break  # the fetch that follows reports an outage
        with self._lock:
            self._awaiting = False
            self._dry = False
            self._dry_from = self._sent + 1
            self._rang = rang

    def close_links(self) -> None:
        """(The feeder, as it ends.) Only the free links: one a processor thread is
        reading its own fetch's reply on is closed when that fetch comes back
        (_done_with). Closing it under the thread failed its fetch at once (EBADF) or,
        when the descriptor was reused by another connection meanwhile, left it reading
        that connection's socket until its timeout."""
        with self._lock:
            self._links_closed = True
            free = list(self._free_links)
        for link in free:
            link.close()
        self._bell_link.close()

    def _give_back_stranded(self) -> None:
        """(The feeder, while quiet.) Plain jobs fetched that no thread will take (the
        threads leave their loop once quiet): a fetch that was out when quiet began, or
        jobs fetched for the event loop that were waiting for a thread. Put back on their
        queues for other processes now, not left listed until this process stops (a
        quiet can last hours before the TERM). If Redis is away they stay listed and
        known, and are tried again on the feeder's next turn (or handed over at the stop)."""
        with self._lock:
            stranded, self._stranded = self._stranded, []
        wake_ups = 0
        while True:
            try:
                work = self._ready.get_nowait()
            except queue.Empty:
                break
            if work is None:
                wake_ups += 1
            else:
                stranded.append(work)
        for _ in range(wake_ups):
            self._ready.put(None)  # the waiting threads' wake-ups, put back
        if not stranded:
            return
        try:
            given = self.strategy.give_back(connection.get_client(), [w.raw for w in stranded])
        except Exception as exc:  # noqa: BLE001 - Redis away: kept, tried again next turn
            errors.report("Quiet give-back", exc)
            with self._lock:
                self._stranded.extend(stranded)
                self._failed()
            return
        errors.recovered("Quiet give-back")
        self.ledger.given_back(stranded)
        if given:
            log.info("quiet: put %d job(s) fetched but not started back on their queues", given)

    def _claim(self) -> tuple[Any, int, list[Work], Wants] | float | object:
        """A connection, the acks and the jobs to ask for, when there is something to send
        now; IDLE when jobs are wanted but the queues ran dry (wait on the doorbells);
        else when to look again (monotonic)."""
        with self._lock:
            self._take_freed()
            now = time.monotonic()
            if not self._free_links:
                return now + WAIT_SLICE  # every fetch out: the first back wakes the feeder
            if now < self._error_until:
                return self._error_until  # Redis was away: not before the pause is over
            if self._dry and self._blocked and now >= self._recheck_at:
                self._dry = False
            wanted = self._wanted()
            if self.ledger.has_acks() or (wanted.total and not self._dry):
                link, number = self._take_link()
                self._asked(wanted)
                return link, number, self.ledger.take_acks(), wanted
            if wanted.total and self._blocked:
                return self._recheck_at  # (or a thread, a slot, coming free)
            if wanted.total:
                return IDLE  # the queues ran dry: wait on their doorbells
            return now + WAIT_SLICE  # every thread is busy: wait for one

    def pause(self, seconds: float | None) -> None:
        """(The feeder.) Wait up to ``seconds`` (at most WAIT_SLICE) for a wake-up."""
        wait = WAIT_SLICE if seconds is None else min(WAIT_SLICE, seconds)
        if wait <= 0:
            return
        try:
            self._wake.get(timeout=wait)
        except queue.Empty:
            return
        get = self._wake.get_nowait  # one look serves every wake-up so far
        while True:
            try:
                get()
            except queue.Empty:
                return

    def _failed(self) -> None:
        """(Under the lock.) A fetch failed: no fetch for a pause, doubling."""
        self._error_until = time.monotonic() + self._error_pause
        self._error_pause = min(self._error_pause * 2, ERROR_MAX_PAUSE)

    def _wanted(self) -> Wants:
        """(Under the lock.) Jobs to ask for: one per thread free with none on its way,
        one per free loop slot with none on its way (none once quiet). A fetch takes
        async jobs only for the loop's slots and plain ones only for threads (lua/fetch.lua
        by the async jobs' paths), so no job waits in this process for a thread or a
        slot while another process may have one free. Where kinds can't be told apart in
        Redis (only django.tasks tasks run on the loop) the slots are asked for only while
        async jobs are coming (the last fetch that brought jobs brought one)."""
        if self.control.quiet.is_set():
            return NOTHING
        plain = max(0, min(self._wanting, self.concurrency) - self._coming_plain)
        if self.aio is None or not (self._aio_coming or time.monotonic() >= self._probe_at):
            return Wants(plain, 0)
        return Wants(plain, max(0, self._aio_free - self._coming_async))

    def _asked(self, wanted: Wants) -> None:
        """(Under the lock.) A fetch asking for ``wanted`` is going out."""
        self._coming_plain += wanted.plain
        self._coming_async += wanted.async_

    def _round_trip(self, link: Any, number: int, acks: list[Work], wanted: Wants) -> list[Work]:
        """One fetch on ``link``: every ack given, and up to ``wanted`` jobs, which enter
        the ledger in the step the fetch leaves it. A failure leaves the acks PENDING in
        the ledger (the heartbeat's to retry)."""
        try:
            raws, ends = [a.raw for a in acks], _ends(acks)
            if self._paths and self.aio is not None:  # by kind: no more than each side has room for
                # Plain jobs that may wait here for a thread, to reach an async job behind
                # them: as many as threads, less those already waiting (a negative count
                # of threads wanting). Read without the lock: a stale look is one job.
                spare = self.concurrency + min(0, self._wanting) if wanted.async_ else 0
                kinds = Kinds(wanted.async_, self._paths, max(0, spare))
                works = self.strategy.fetch_many(link, raws, wanted.total, ends, kinds=kinds)
            else:
                works = self.strategy.fetch_many(link, raws, wanted.total, ends)
        except BaseException:
            self.ledger.fetched(number, ())
            self.ledger.acks_failed(acks)
            raise
        errors.recovered("Fetch")  # (logged before any job this fetch took can start)
        self.ledger.fetched(number, works)
        self.ledger.acks_sent(acks)
        self.acks_sent += len(acks)
        return works

    def _take_link(self) -> tuple[Any, int]:
        """(Under the lock.) A free connection for a fetch about to be sent, and the
        fetch's number (out in the ledger from now: the reconcile waits for it)."""
        link = self._free_links.pop()
        self._sent += 1
        self.ledger.fetch_out(self._sent)
        return link, self._sent

    def _done_with(self, link: Any, wanted: Wants) -> None:
        """(Under the lock.) A fetch came back (or failed): its connection is free, and
        the jobs it asked for are no longer on their way; once the feeder has exited,
        its connection is closed (no round trip: the socket only)."""
        self._free_links.append(link)
        self._coming_plain -= wanted.plain
        self._coming_async -= wanted.async_
        if self._links_closed:
            link.close()

    def _hand_out(self, works: list[Work], wanted: Wants, keep: int, number: int) -> Work | None:
        """(Under the lock.) What a fetch brought: async jobs to the event loop, plain
        ones to the threads waiting; the first one to the caller when ``keep`` (the
        fetching thread's own). Once stopping, none is handed out: all stay listed and
        known, for the hand-over."""
        self._error_pause, self._error_until = IDLE_FIRST_PAUSE, 0.0
        self.fetches += 1
        self.fetched_jobs += len(works)
        blocked = getattr(works, "blocked", "")
        self._note_dry(len(works), wanted, blocked, number)
        if self.aio is not None:
            works = self._to_loop(works, wanted, blocked)
        self._wanting -= len(works)
        if self.control.stopping.is_set():
            return None  # listed, known: the hand-over's
        if self.control.quiet.is_set():
            if works:  # no thread will take them: the feeder puts them back
                self._stranded.extend(works)
                self._wake.put(None)
            return None
        own = works[0] if keep and works else None
        ready = self._ready
        for work in works[1:] if own is not None else works:
            ready.put(work)
        return own

    def _note_dry(self, got: int, wanted: Wants, blocked: str, number: int) -> None:
        """(Under the lock.) What fetch ``number``, which took ``got`` jobs, says of the
        queues. Short of what it asked for, they ran dry (or hold only jobs of a kind
        with no room: ``blocked``): the feeder waits on their doorbells, and only fetches
        that carry acks go meanwhile (asking for jobs too); once blocked, a thread or a
        loop slot that comes free ends the wait. An async job left while the loop had
        free slots not asked for is fetched at once."""
        if wanted.total and got < wanted.total:
            unasked = blocked == "a" and not wanted.async_ and self._aio_free > 0
            if number >= self._dry_from and not unasked:
                if not blocked and (self._blocked or not self._dry):
                    self._wake.put(None)  # the feeder's turn: to its wait on the doorbells
                self._dry = True
                self._blocked = bool(blocked)
                self._recheck_at = time.monotonic() + BLOCKED_RECHECK
        elif got:
            self._dry = self._blocked = False
            if self._awaiting:  # a thread's own fetch found jobs: the feeder fetches too
                self._bell_link.interrupt()

    def _to_loop(self, works: list[Work], wanted: Wants, blocked: str) -> list[Work]:
        """(Under the lock.) Hand the async jobs among ``works`` to the event loop;
        returns the others. Whether async jobs are coming (:meth:`_wanted`): yes when
        some came or one was left for want of a slot; no when slots were asked for and
        none came."""
        aio = self.aio
        plain: list[Work] = []
        loop_jobs = []
        for work in works:
            job = aio.sort(work)
            if job is None:
                plain.append(work)
            else:
                loop_jobs.append((work, job))
        if loop_jobs:
            self._aio_free -= len(loop_jobs)
            aio.submit(loop_jobs)
        if loop_jobs or blocked == "a":
            self._aio_coming = True
        elif wanted.async_:
            self._aio_coming = False
            self._probe_at = time.monotonic() + (ASYNC_PROBE if self._paths else PROBE_PAUSE)
        return plain


class Feeder(Background):
    """The dispatcher's thread (background.Background): sends the fetches no processor
    thread could, polls while the queues are empty, retries while Redis is away. A turn
    that raised (a bug, never an outage: those are reported) is followed by the next
    after a pause, with the dispatcher's state (threads waiting, acks) kept."""

    name = "feeder"

    def __init__(self, dispatcher: Dispatcher) -> None:
        super().__init__()
        self.dispatcher = dispatcher

    def step(self) -> float | None:
        return self.dispatcher.feed_once()

    def rest(self, seconds: float | None) -> None:
        self.dispatcher.pause(seconds)

    def last(self) -> None:
        self.dispatcher.close_links()
