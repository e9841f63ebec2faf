"""The ledger: this process's one record of every job it has fetched, from the fetch's
return to the job's settlement, trusted over Redis (which may be what is failing, or may
have lost its last writes in a failover).

(Over 400 lines: every state change of a fetched job is a method here, under the one
lock, so that the state table's invariants are read in one place.)

Each fetched job is one :class:`Work`, in one state at a time, changed only by the
methods below, each one step under the ledger's one lock (the table of states and
transitions is in docs/internals.md, "The ledger"):

============  ===========================================================================
FETCHED       on this process's in-progress list, not started: waiting for a thread or
              a loop slot, or left for the hand-over (a fetch back after the stop began)
PERFORMING    started: in the server chain and the job function, until the function
              returns; the heartbeat keeps its locks alive
SETTLING      its function returned and it claimed its settlement: it is settling
ACK           succeeded (or dropped): its ack waits for the next fetch to carry it
ACKING        its ack is out, on a fetch
PENDING       a settlement Redis refused (an ack whose fetch failed, a filing): the
              heartbeat's to retry, then the hand-over's
ABANDONED     the watchdog settled it for its stuck thread; the thread, should it come
              back, settles nothing
REFUSED       refused its claim: the shutdown hand-over began first and requeues it
FENCED        this process was taken for dead and its job recovered (moved off its list):
              the run goes on, settles nothing and releases nothing, out of the ledger
============  ===========================================================================

A job leaves the ledger when it is acked or filed, given back (fetched while the
process went quiet), handed over at shutdown, or forgotten (its thread died of a bug:
the reconcile then requeues it). The
fetches out are in the ledger too (:meth:`fetch_out`, :meth:`fetched`): a job a fetch
brings back enters the ledger in the same step that the fetch leaves it, so the
heartbeat's reconcile (fetch.ReliableFetch.after_beat) reads one consistent
:meth:`snapshot` of what this process knows, never a job between two containers.

At shutdown the hand-over and the runs still running must agree on who settles each
run: its own thread or coroutine (ack, retry, dead) or the hand-over (requeue); never
both. A run whose function returns claims its settlement (:meth:`performed`); the
hand-over first refuses every later claim (:meth:`begin_hand_over`) and waits for the
claims already made to be settled or left pending.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

FETCHED = "fetched"
PERFORMING = "performing"
SETTLING = "settling"
ACK = "ack"
ACKING = "acking"
PENDING = "pending"
ABANDONED = "abandoned"
REFUSED = "refused"
FENCED = "fenced"
STATES = (FETCHED, PERFORMING, SETTLING, ACK, ACKING, PENDING, ABANDONED, REFUSED, FENCED)
# States in which a run is still the business of its own thread or coroutine.
_STARTED = (PERFORMING, SETTLING)


class Work:
    """One fetched job: its queue and its raw payload exactly as it sits in Redis, and
    its place in the ledger (``state``; what it keeps of its outcome, ``ended``; the
    filing Redis refused, ``filing``; who runs it, ``runner``, since ``run_at``). Its
    identity is the run's: two copies of one payload are two runs."""

    __slots__ = ("queue", "raw", "state", "ended", "filing", "runner", "run_at")

    def __init__(self, queue: str, raw: str) -> None:
        self.queue = queue
        self.raw = raw
        self.state = ""  # not in the ledger
        self.ended: Any = None  # core/results.Ended, written with its settlement
        self.filing: Filing | None = None
        self.runner = ""  # the thread (or async run) running it, for the Busy page
        self.run_at = 0.0

    def __repr__(self) -> str:
        return f"<Work {self.queue} {self.state or 'outside'} {self.raw[:60]!r}>"


@dataclass(frozen=True)
class Filing:
    """A finished job still to be filed: ZADD ``payload`` to ``target`` at ``score``;
    ``on_dead``: the job its ``on_dead`` option names, pushed in the same step as a
    filing in dead (retry control: exactly once), as (payload, score, queue): score ""
    for its queue's list."""

    target: str  # "retry", "dead" or "schedule"
    score: float
    payload: str
    on_dead: tuple[str, str, str] | None = None

    def unsettled_entry(self) -> str:
        """This filing as a ``P:unsettled`` entry (worker/unsettled.py reads it back)."""
        entry: dict[str, Any] = {
            "target": self.target,
            "score": self.score,
            "payload": self.payload,
        }
        if self.on_dead is not None:
            entry["on_dead"] = list(self.on_dead)
        return json.dumps(entry)


@dataclass(frozen=True)
class Snapshot:
    """What the process knows at one instant (the heartbeat's reconcile): every raw
    payload in the ledger, and the fetches out (by number)."""

    known: frozenset[str]
    fetches_out: frozenset[int]


class Control:
    """The process's run state, shared by its threads, its event loop and its job source:
    quiet (stop fetching, finish what runs) and stopping (quiet, and the hand-over is
    coming: a job fetched from now on is left for it)."""

    def __init__(self, idle_max: float) -> None:
        self.quiet = threading.Event()
        self.stopping = threading.Event()
        self.idle_max = idle_max  # the longest pause between fetches that found nothing


class Ledger:
    def __init__(self) -> None:
        # One lock for every change; its condition wakes whoever waits for one (the
        # hand-over for the claims settling, a run's end for a lock refresh in flight).
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._runs: dict[int, Work] = {}  # id(work) -> every job in the ledger
        self._acks: list[Work] = []  # in state ACK, oldest first (what the next fetch carries)
        self._out: set[int] = set()  # the fetches out, by number
        # How many runs of each payload are PERFORMING (the heartbeat refreshes their locks:
        # an event loop runs hundreds at once), and the payloads whose locks a refresh is
        # writing now: a run leaves PERFORMING only once that is done (while_performing).
        self._performing: dict[str, int] = {}
        self._refreshing: dict[str, int] = {}
        self._handing_over = False
        # When (monotonic) the heartbeat last looked whether this process was taken for
        # dead (None: no heartbeat, as in tools); a run that ends longer than
        # ``stale_after`` after it (the whole process was frozen) waits up to
        # ``stale_wait`` for the next look before it claims its settlement (fence).
        self._looked_at: float | None = None
        self.stale_after = float("inf")
        self.stale_wait = 0.0

    # Entering: fetches and what they bring -----------------------------------------------

    def fetch_out(self, number: int) -> None:
        """A fetch numbered ``number`` is about to be sent."""
        with self._lock:
            self._out.add(number)

    def fetched(self, number: int, works: Iterable[Work]) -> None:
        """The fetch ``number`` came back (or failed: no ``works``): its jobs enter the
        ledger as FETCHED in the same step as it leaves the fetches out."""
        with self._lock:
            self._out.discard(number)
            for work in works:
                work.state = FETCHED
                self._runs[id(work)] = work

    # A run's life --------------------------------------------------------------------------

    def start(self, work: Work, runner: str) -> None:
        """FETCHED -> PERFORMING, run by ``runner`` (a thread's or an async run's name)."""
        with self._lock:
            work.state = PERFORMING
            work.runner, work.run_at = runner, time.time()
            self._runs[id(work)] = work
            self._performing[work.raw] = self._performing.get(work.raw, 0) + 1

    def performed(self, work: Work) -> bool:
        """PERFORMING -> SETTLING: the job function returned, and the run claims its
        settlement. False (-> REFUSED) once the hand-over has begun: the run is abandoned
        to its requeued copy, settles nothing and releases no lock; False also for a run
        the watchdog abandoned (settled for it). Idempotent."""
        with self._lock:
            self._after_refresh(work.raw)
            # Back from a freeze: the heartbeat's next beat may fence this run first.
            self._changed.wait_for(lambda: not self._stale(), self.stale_wait)
            if work.state == SETTLING:
                return True
            if work.state != PERFORMING:
                return False
            self._leave_performing(work)
            if self._handing_over:
                work.state = REFUSED
                self._changed.notify_all()
                return False
            work.state = SETTLING
            return True

    def succeeded(self, work: Work, ended: Any = None) -> None:
        """SETTLING -> ACK: the next fetch carries its ack (and ``ended``, its outcome)."""
        with self._lock:
            if work.state != SETTLING:
                return
            work.state, work.ended = ACK, ended
            self._acks.append(work)
            self._changed.notify_all()

    def file_later(self, work: Work, filing: Filing, ended: Any = None) -> None:
        """SETTLING (or ABANDONED, settled by the watchdog) -> PENDING: a filing Redis
        refused, for the heartbeat to retry."""
        with self._lock:
            work.state, work.filing, work.ended = PENDING, filing, ended
            self._runs[id(work)] = work
            self._changed.notify_all()

    def ack_later(self, work: Work, ended: Any = None) -> None:
        """An ack Redis refused (or that goes alone, later): PENDING."""
        with self._lock:
            if work in self._acks:
                self._acks.remove(work)
            work.state, work.ended = PENDING, ended
            self._runs[id(work)] = work
            self._changed.notify_all()

    def settled(self, work: Work) -> None:
        """Acked or filed: it leaves the ledger."""
        with self._lock:
            self._drop(work)
            self._changed.notify_all()

    def forget(self, work: Work) -> None:
        """A run whose thread (or task) died of a bug in the run layer: it leaves the
        ledger unsettled, so the heartbeat's reconcile finds its job on the in-progress
        list unknown and puts it back on its queue (it runs again)."""
        self.settled(work)

    def left(self, work: Work) -> None:
        """A run leaves without settling (its claim refused, or its thread died): REFUSED,
        kept for the hand-over, which requeues its job. An abandoned run's own thread
        coming back changes nothing (the watchdog settled it)."""
        with self._lock:
            if work.state in _STARTED:
                if work.state == PERFORMING:
                    self._leave_performing(work)
                work.state = REFUSED
            self._changed.notify_all()

    # The acks' side (the job source) ----------------------------------------------------------

    def take_acks(self) -> list[Work]:
        """ACK -> ACKING: every ack waiting, for one fetch to carry."""
        with self._lock:
            acks, self._acks = self._acks, []
            for work in acks:
                work.state = ACKING
            return acks

    def has_acks(self) -> bool:
        return bool(self._acks)  # (a read of one list's truth: no lock needed to peek)

    def acks_sent(self, acks: list[Work]) -> None:
        """The fetch carrying ``acks`` came back: they leave the ledger."""
        with self._lock:
            for work in acks:
                self._drop(work)

    def acks_failed(self, acks: list[Work]) -> None:
        """The fetch carrying ``acks`` failed: PENDING, for the heartbeat."""
        with self._lock:
            for work in acks:
                if work.state == ACKING:
                    work.state = PENDING

    # What the watchdog does for a stuck run ---------------------------------------------------

    def abandon(self, work: Work) -> bool:
        """PERFORMING -> ABANDONED: the watchdog settles the run for its stuck
        thread (rule 15); False when it has claimed its own settlement already, left, or
        the hand-over has begun (which requeues it)."""
        with self._lock:
            self._after_refresh(work.raw)
            if self._handing_over or work.state != PERFORMING:
                return False
            work.state = ABANDONED
            self._leave_performing(work)
            self._changed.notify_all()
        return True

    # Fencing (the heartbeat, once it finds this process was taken for dead) -----------------

    def looked(self) -> None:
        """The heartbeat has just looked whether this process was taken for dead (its
        beat went through, fencing what it must; or it failed, and nothing can be known):
        runs held by :meth:`performed` go on."""
        with self._lock:
            self._looked_at = time.monotonic()
            self._changed.notify_all()

    def _stale(self) -> bool:
        looked = self._looked_at
        return looked is not None and time.monotonic() - looked > self.stale_after

    def fence(self, listed: set[str]) -> list[Work]:
        """PERFORMING -> FENCED for every run whose job is not in ``listed`` (the raw
        payloads on this process's in-progress lists now): orphan recovery moved it to
        run elsewhere, so this run's claim is refused (it acks, files and releases
        nothing: its copy owns all of that) and it leaves the ledger at once (no
        hand-over requeues it, no lock refresh renews it). Returns the runs fenced."""
        with self._lock:
            fenced = [
                w for w in self._runs.values() if w.state == PERFORMING and w.raw not in listed
            ]
            for work in fenced:
                self._drop(work)
                work.state = FENCED
            if fenced:
                self._changed.notify_all()
            return fenced

    # The hand-over ------------------------------------------------------------------------------

    def begin_hand_over(self, timeout: float) -> int:
        """Refuse every later claim, then wait up to ``timeout`` for the runs SETTLING to be
        settled (or left pending); returns how many still are (0 normally)."""
        with self._lock:
            self._handing_over = True
            self._changed.wait_for(
                lambda: not any(w.state == SETTLING for w in self._runs.values()), timeout
            )
            return sum(1 for w in self._runs.values() if w.state == SETTLING)

    def wait_idle(self, timeout: float, force: threading.Event) -> bool:
        """Wait up to ``timeout`` for every run started to have settled itself (or left),
        less if ``force`` is set (a second TERM); True when none is left."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while any(w.state in _STARTED for w in self._runs.values()):
                left = deadline - time.monotonic()
                if left <= 0 or force.is_set():
                    return False
                self._changed.wait(min(left, 0.1))  # (force is an Event: looked at often)
            return True

    @property
    def handing_over(self) -> bool:
        return self._handing_over

    def pending(self) -> list[Work]:
        """The settlements Redis refused (PENDING), for the heartbeat and the hand-over."""
        with self._lock:
            return [w for w in self._runs.values() if w.state == PENDING]

    def handed_over(self, works: Iterable[Work]) -> None:
        with self._lock:
            for work in works:
                self._drop(work)

    def given_back(self, works: Iterable[Work]) -> None:
        """FETCHED jobs put back on their queues (the process went quiet): they leave."""
        self.handed_over(works)

    # Reading ----------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(frozenset(w.raw for w in self._runs.values()), frozenset(self._out))

    def works(self, *states: str) -> list[Work]:
        """The jobs in ``states`` (all when none given)."""
        with self._lock:
            runs = list(self._runs.values())
        return [w for w in runs if not states or w.state in states]

    def running(self) -> list[Work]:
        """The runs started and not settled (their thread's or coroutine's)."""
        return self.works(*_STARTED, ABANDONED)

    def performing(self) -> list[str]:
        with self._lock:
            return list(self._performing)

    def busy(self) -> int:
        with self._lock:
            return sum(1 for w in self._runs.values() if w.state in _STARTED)

    def board(self) -> dict[str, str]:
        """What each runner runs now (the heartbeat's work snapshot, the admin's Busy)."""
        with self._lock:
            return {
                w.runner: json.dumps({"queue": w.queue, "payload": w.raw, "run_at": w.run_at})
                for w in self._runs.values()
                if w.state in _STARTED and w.runner
            }

    def describe(self, work: Work) -> str:
        """``func (jid …)`` of a run, for a log line."""
        try:
            job = json.loads(work.raw)
            return f"{job['func']} (jid {job['jid']})"
        except (ValueError, KeyError, TypeError):
            return work.runner or "a job"

    @contextlib.contextmanager
    def while_performing(self, raw: str) -> Iterator[bool]:
        """For the heartbeat's lock refresh: yields whether ``raw`` is still PERFORMING,
        and keeps it so until the block ends. A run whose function returns meanwhile
        waits to leave PERFORMING until the refresh is done, so a refresh never lands
        after the run has moved on (a retried failure extends its locks to cover the
        backoff right after; a refresh landing later would cut them back)."""
        with self._lock:
            still = raw in self._performing
            if still:
                self._refreshing[raw] = self._refreshing.get(raw, 0) + 1
        try:
            yield still
        finally:
            if still:
                with self._lock:
                    left = self._refreshing[raw] - 1
                    if left:
                        self._refreshing[raw] = left
                    else:
                        del self._refreshing[raw]
                    self._changed.notify_all()

    # Inside the lock -------------------------------------------------------------------------

    def _after_refresh(self, raw: str) -> None:
        """(Under the lock.) Wait for a refresh of ``raw``'s locks in flight to be done."""
        self._changed.wait_for(lambda: raw not in self._refreshing)

    def _leave_performing(self, work: Work) -> None:
        left = self._performing.get(work.raw, 1) - 1
        if left > 0:
            self._performing[work.raw] = left
        else:
            self._performing.pop(work.raw, None)

    def _drop(self, work: Work) -> None:
        if work.state == PERFORMING:
            self._leave_performing(work)
        self._runs.pop(id(work), None)
        work.state = ""
