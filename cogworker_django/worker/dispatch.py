"""Sharing reliable fetch among a pool of processor threads: several jobs, and every
pending ack, per round trip.

A thread that needs work takes a job another thread already fetched for it; else, if no
fetch is under way, it fetches itself: all acks waiting so far, plus one job for itself
and one for each thread then waiting. A job is fetched only for a thread that is idle
at that moment and handed to it at once, so no job ever waits behind a slow one; under
load a round trip carries as many jobs as threads came free meanwhile. Jobs fetched but
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
        self._fetching = False
        self._waiting = 0
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
                if not self._fetching:
                    break
                self._waiting += 1
                try:
                    self._cond.wait(WAIT_SLICE)
                finally:
                    self._waiting -= 1
            else:
                return self._ready.popleft()
            self._fetching = True
            acks, self._acks = self._acks, []
            wanted = min(1 + self._waiting, self.concurrency)
        return self._fetch(conn, acks, wanted)

    def _fetch(self, conn: Any, acks: list[Work], wanted: int) -> Work | None:
        try:
            works = self.strategy.fetch_many(conn, [a.raw for a in acks], wanted)
        except BaseException:
            with self._cond:
                self._fetching = False  # a waiter fetches next (and meets the outage itself)
                self._cond.notify_all()
            for work in acks:
                self.record.finished(work)  # its ack stays pending: the heartbeat's to retry
            raise
        with self._cond:
            self._fetching = False
            if len(works) < wanted:
                self._dry_fetches += 1
            self._ready.extend(works[1:])
            self._cond.notify_all()
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
