"""This process's own record of its jobs, trusted over Redis (which may be what is
failing, or may have lost its last writes in a failover).

- *running*: fetched and not yet settled (a count per raw payload: two copies of one
  payload can run at once);
- *performing*: the subset still inside the job function (the heartbeat keeps their
  locks alive, and only theirs);
- *pending*: finished, but not yet settled in Redis: an ack that has not gone through,
  or a failure that could not be filed. Retried on every heartbeat and at shutdown.

At shutdown the hand-over and the processors still running must agree, for each run,
on who settles it: the processor (ack, retry, dead) or the hand-over (requeue). Either
alone, never both, or a job is requeued *and* acked or filed, and runs again. A run
whose function returns *claims* its settlement (:meth:`claim_settlement`); the hand-over
begins by refusing every later claim (:meth:`begin_hand_over`) and waits for the claims
already made to be settled or left pending. A run refused its claim is abandoned: the
hand-over requeues it, and its processor settles nothing and releases no lock (the
requeued copy owns them now).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Work:
    """One fetched job: its queue and its raw payload exactly as it sits in Redis."""

    queue: str
    raw: str


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


ACK = "ack"


class Control:
    """The process's run state, shared by its processor threads and job source: quiet
    (stop fetching, finish what runs) and stopping (quiet, and the hand-over is coming:
    a job fetched from now on is left for it)."""

    def __init__(self, idle_max: float) -> None:
        self.quiet = threading.Event()
        self.stopping = threading.Event()
        self.idle_max = idle_max  # the longest pause between fetches that found nothing


class WorkBoard:
    """What each processor thread runs now, for the heartbeat's work snapshot (the
    admin's Busy page)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._work: dict[str, dict[str, Any]] = {}

    def started(self, thread: str, work: Work) -> None:
        with self._lock:
            self._work[thread] = {"queue": work.queue, "payload": work.raw, "run_at": time.time()}

    def finished(self, thread: str) -> None:
        with self._lock:
            self._work.pop(thread, None)

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return {t: json.dumps(w) for t, w in self._work.items()}

    def describe(self, thread: str) -> str:
        """The job ``thread`` runs, for a log line: ``func (jid …)`` (the thread's name
        when it runs nothing, or its payload can't be read)."""
        with self._lock:
            work = self._work.get(thread)
        try:
            job = json.loads(work["payload"]) if work else None
            return f"{job['func']} (jid {job['jid']})" if isinstance(job, dict) else thread
        except (ValueError, KeyError, TypeError):
            return thread


class Record:
    """Runs are tracked by identity (the :class:`Work` object a fetch made), so that two
    copies of one payload are two runs, and every step is idempotent per run: a run the
    watchdog abandoned (worker/timeouts.py) may come back from its job much later and
    call any of these again without touching another run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, Work] = {}  # id(work) -> fetched, not yet settled
        self._performing: dict[int, Work] = {}  # the subset still inside the job
        # How many runs of each payload are performing: an event loop runs hundreds at
        # once, and a scan of them all at every run's end would cost as much each.
        self._performing_raws: dict[str, int] = {}
        self._guards: dict[str, threading.Lock] = {}  # raw -> guard (while_performing)
        self._pending: dict[str, str | Filing] = {}
        # The outcome each pending settlement keeps (core/results.py), written with it.
        self._ended: dict[str, Any] = {}
        self._handing_over = False
        self._refused: dict[str, int] = {}  # raw -> runs refused their claim (hand-over)
        self._settling: dict[int, Work] = {}  # id(work) -> a claimed run not yet settled
        self._claimed: dict[int, Work] = {}  # claimed runs, until they finish
        self._abandoned: dict[int, Work] = {}  # runs settled for them (never by their thread)
        self._settled_claims = threading.Condition(self._lock)

    def started(self, work: Work) -> None:
        with self._lock:
            self._running[id(work)] = work
            if id(work) not in self._performing:
                raws = self._performing_raws
                raws[work.raw] = raws.get(work.raw, 0) + 1
            self._performing[id(work)] = work

    def performed(self, work: Work) -> None:
        # Waits for a heartbeat refresh of this run's locks in flight (while_performing).
        with self._guard(work.raw):
            with self._lock:
                if id(work) not in self._abandoned:  # (abandon took it out already)
                    self._leave_performing(work)

    def _leave_performing(self, work: Work, exact: bool = False) -> None:
        # ``exact``: that very run or nothing (never an equal copy still performing).
        found = self._performing.pop(id(work), None) if exact else _pop(self._performing, work)
        if found is None:
            return
        raws = self._performing_raws
        left = raws.get(found.raw, 1) - 1
        if left > 0:
            raws[found.raw] = left
        else:
            raws.pop(found.raw, None)
            self._guards.pop(found.raw, None)

    @contextlib.contextmanager
    def while_performing(self, raw: str) -> Iterator[bool]:
        """For the heartbeat's lock refresh: yields whether ``raw`` is still performing,
        and keeps it so until the block ends. A run whose function returns meanwhile waits
        to leave *performing* until the refresh is done, so a refresh never lands after
        the run has moved on: a retried failure extends its locks to cover the backoff
        right after, and a refresh landing later would cut them back."""
        with self._guard(raw):
            with self._lock:
                still = raw in self._performing_raws
            yield still

    def _guard(self, raw: str) -> threading.Lock:
        with self._lock:
            return self._guards.setdefault(raw, threading.Lock())

    def finished(self, work: Work) -> None:
        with self._lock:
            if id(work) in self._abandoned:
                return  # its settlement was made for it (release_abandoned)
            if _pop(self._running, work) is not None:
                self._claimed.pop(id(work), None)

    def settle_later(self, raw: str, how: str | Filing, ended: Any = None) -> None:
        """``raw``'s settlement (ACK, or a filing) is still to be made; ``ended``: the
        run's outcome to keep (results.Ended), written with it."""
        with self._lock:
            self._pending[raw] = how
            if ended is not None:
                self._ended[raw] = ended

    def settled(self, raw: str, how: str | Filing | None = None) -> None:
        with self._lock:
            if how is None or self._pending.get(raw) == how:
                self._pending.pop(raw, None)
                self._ended.pop(raw, None)

    def ended_of(self, raw: str) -> Any:
        """The outcome to keep with ``raw``'s pending settlement (None for none)."""
        with self._lock:
            return self._ended.get(raw)

    def running(self) -> list[Work]:
        with self._lock:
            return list(self._running.values())

    def running_raws(self) -> set[str]:
        with self._lock:
            return {w.raw for w in self._running.values()}

    def performing(self) -> list[str]:
        with self._lock:
            return list(self._performing_raws)

    def pending(self) -> dict[str, str | Filing]:
        with self._lock:
            return dict(self._pending)

    # The shutdown hand-over ------------------------------------------------------------

    def claim_settlement(self, work: Work) -> bool:
        """True when this run's processor is to settle it; False once the hand-over has
        begun (the run is abandoned to its requeued copy), and for a run the watchdog
        abandoned (settled for it). Idempotent per run."""
        with self._lock:
            if id(work) in self._abandoned:
                return False
            if id(work) in self._settling:
                return True
            if self._handing_over:
                # Interrupted by the stop (a coroutine the stop cancelled, a run that
                # ended after the hand-over began): its requeued copy counts it.
                self._refused[work.raw] = self._refused.get(work.raw, 0) + 1
                return False
            self._settling[id(work)] = work
            self._claimed[id(work)] = work
            return True

    def settlement_done(self, work: Work) -> None:
        """The claimed run is settled, or left in *pending* for later."""
        with self._lock:
            if self._settling.pop(id(work), None) is not None:
                self._settled_claims.notify_all()

    def begin_hand_over(self, timeout: float) -> int:
        """Refuse every later claim, then wait up to ``timeout`` for the claims made so
        far to be settled; returns how many are still unsettled (0 normally)."""
        with self._lock:
            self._handing_over = True
            self._settled_claims.wait_for(lambda: not self._settling, timeout)
            return len(self._settling)

    def interrupted_raws(self) -> set[str]:
        """The runs the stop interrupts: still running, or refused their settlement
        (they ended after the hand-over began). requeue.HandedBack counts them."""
        with self._lock:
            return {w.raw for w in self._running.values()} | set(self._refused)

    @property
    def handing_over(self) -> bool:
        with self._lock:
            return self._handing_over

    # Abandonment (worker/timeouts.py) ----------------------------------------------------

    def abandon(self, work: Work) -> bool:
        """Claim the settlement of a run still inside its job *for* it (rule 15): True when the
        caller is now the one to settle it (then :meth:`settlement_done` and
        :meth:`release_abandoned`). From then on the run's own thread is refused its
        claim (it settles nothing, releases no lock) and its record calls are no-ops.
        False when the run has claimed already (it is settling itself), has finished,
        or the hand-over has begun (which requeues it)."""
        with self._lock:
            key = id(work)
            if (
                self._handing_over
                or key in self._claimed
                or key in self._abandoned
                or self._running.get(key) is not work
            ):
                return False
            self._abandoned[key] = work
            self._settling[key] = work
            self._claimed[key] = work
        with self._guard(work.raw):  # after a heartbeat refresh in flight
            with self._lock:
                self._leave_performing(work, exact=True)
        return True

    def release_abandoned(self, work: Work) -> None:
        """The abandoned run is settled (or pending): it is no longer running."""
        with self._lock:
            if id(work) in self._abandoned:
                self._running.pop(id(work), None)
                self._claimed.pop(id(work), None)

    def left(self, work: Work) -> None:
        """The abandoned run's thread came back from the job and is leaving."""
        with self._lock:
            self._abandoned.pop(id(work), None)

    def is_abandoned(self, work: Work) -> bool:
        with self._lock:
            return id(work) in self._abandoned


def _pop(runs: dict[int, Work], work: Work) -> Work | None:
    """Remove the run ``work`` from ``runs``: that very object, else (a caller holding an
    equal copy, as tests do) the latest equal one."""
    found = runs.pop(id(work), None)
    if found is not None:
        return found
    for key in reversed(list(runs)):
        if runs[key] == work:
            return runs.pop(key)
    return None
