"""Sharing reliable fetch among a pool of processor threads: several jobs, and every
pending ack, per round trip.

A thread that needs work takes a job another thread already fetched for it; else, if
no fetch under way is bringing one for it, it fetches itself (up to
``FETCHES_IN_FLIGHT`` fetches at once): all acks waiting so far, plus one job for itself
and one for each thread then waiting that no other fetch is bringing one for. A job is
fetched only for a thread that is idle at that moment, so no job waits behind a slow one
(but for the moment between a fetch's start and its return: a waiting thread served by
another fetch meanwhile leaves its job to the next thread that comes free); under load a
round trip carries as many jobs as threads came free meanwhile. Several fetches in
flight keep a thread that comes free just after a fetch started from waiting for that
one to return before it can start its own. Jobs fetched but
not yet taken are on the in-progress list like any other: the shutdown hand-over
requeues them, and the heartbeat's reconcile counts them as known (:meth:`known`).

The dispatcher owns the record's side of acks: a finished job handed in stays *running*
in the record until the fetch carrying its ack returns (then it is settled), or, if that
fetch fails, is left *pending* for the heartbeat to ack.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Protocol

from .. import errors
from .record import ACK, Control, Record, Work

# How often a waiting thread re-checks quiet while another thread's fetch is under way.
WAIT_SLICE = 0.25
# Fetches a process may have in flight at once (each carrying the acks waiting so far).
FETCHES_IN_FLIGHT = 3


class BatchFetch(Protocol):
    """What the dispatcher needs of its strategy (fetch.ReliableFetch)."""

    def fetch_many(self, conn: Any, acks: list[str], count: int) -> list[Work]: ...

    def ack(self, conn: Any, raw: str) -> None: ...


class Dispatcher:
    blocking = False

    def __init__(
        self, strategy: BatchFetch, record: Record, control: Control, concurrency: int
    ) -> None:
        self.strategy = strategy
        self.record = record
        self.control = control
        self.concurrency = concurrency
        self._cond = threading.Condition()
        self._acks: list[Work] = []
        self._ready: deque[Work] = deque()
        self._in_flight = 0  # fetches under way
        self._promised = 0  # jobs those fetches bring for threads that were waiting
        self._waiting = 0
        self.max_in_flight = max(1, min(FETCHES_IN_FLIGHT, concurrency))
        # Fetches that found fewer jobs than wanted (the queues ran dry): a thread that
        # waited through one idles instead of fetching again at once.
        self._dry_fetches = 0

    def next(self, conn: Any, done: Work | None) -> Work | None:
        """Hand in ``done`` (a finished job to ack) and get the next job, or None when
        there is none (the caller idles) or the process is quiet."""
        with self._cond:
            if done is not None:
                self._acks.append(done)
            seen = self._dry_fetches
            if self.control.stopping.is_set():
                # Jobs fetched but not taken stay listed: the hand-over requeues them.
                return None
            while not self._ready:
                if self.control.quiet.is_set():
                    return None
                # The queues ran dry while this thread waited: idle, unless acks are
                # still waiting (they go now, not after an idle pause).
                if self._dry_fetches != seen and not self._acks:
                    return None
                # No fetch under way is bringing a job for this thread: fetch (if room).
                uncovered = self._waiting >= self._promised
                if uncovered and self._in_flight < self.max_in_flight:
                    break
                self._waiting += 1
                try:
                    self._cond.wait(WAIT_SLICE)
                finally:
                    self._waiting -= 1
            else:
                return self._ready.popleft()
            self._in_flight += 1
            acks, self._acks = self._acks, []
            extra = min(max(0, self._waiting - self._promised), self.concurrency - 1)
            self._promised += extra
        return self._fetch(conn, acks, extra)

    def _fetch(self, conn: Any, acks: list[Work], extra: int) -> Work | None:
        wanted = 1 + extra
        try:
            works = self.strategy.fetch_many(conn, [a.raw for a in acks], wanted)
        except BaseException:
            with self._cond:
                self._in_flight -= 1  # a waiter fetches next (and meets the outage itself)
                self._promised -= extra
                self._cond.notify_all()
            for work in acks:
                self.record.finished(work)  # its ack stays pending: the heartbeat's to retry
            raise
        with self._cond:
            self._in_flight -= 1
            self._promised -= extra
            self._ready.extend(works[1:])
            if len(works) < wanted:
                self._dry_fetches += 1
                self._cond.notify_all()  # every waiter learns the queues ran dry
            else:
                # Wake as many waiters as jobs came for them, and one more to fetch in
                # this fetch's place if some are left waiting (waking every thread for
                # each fetch costs more CPU than the jobs themselves).
                more = self._waiting > len(works) - 1 and self._in_flight < self.max_in_flight
                self._cond.notify(len(works) - 1 + (1 if more else 0))
        for work in acks:
            self.record.settled(work.raw, ACK)
            self.record.finished(work)
        return works[0] if works else None

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
        """A job fetched while the process stops: not run, kept listed (and known) for the
        hand-over to requeue."""
        with self._cond:
            self._ready.appendleft(work)
        return True

    def known(self) -> set[str]:
        """Jobs fetched and not yet taken by a thread (known to this process)."""
        with self._cond:
            return {w.raw for w in self._ready}

    ready_raws = known

    def flush(self, conn: Any) -> None:
        """At shutdown: send the acks still waiting for a fetch (raises on failure; the
        hand-over then drops them from the list, as pending acks)."""
        with self._cond:
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
