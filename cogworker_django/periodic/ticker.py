"""The ticker: every ``PERIODIC_TICK`` seconds, in every worker process, fire the
periodic entries whose slot is due. No process is special: the claim script makes each
slot fire once per fleet.

(Over 400 lines: a tick's duties share one process's entries, claims and deferred
rollbacks.)

Duties, each tick:
- retry this process's deferred lock releases first (a slot may be blocked only by a
  release an outage delayed), then its pending claim rollbacks (each before its entry
  is looked at again);
- for each entry: its latest due slot in its own zone (slots.py); unless this process
  is already done with that slot, build the job, claim the slot in one script
  (lua/periodic_claim.lua: disabled? last_slot older? per-slot NX lock; for
  ``until_executed`` the running lock, taken before the job exists), then push it;
  a push that fails rolls the claim back (lua/periodic_rollback.lua), and a rollback
  that fails is kept and retried before that entry's next look;
- a slot blocked by a running lock is retried for a grace of three heartbeats before
  it counts as skipped (the lock may only be waiting for a deferred release);
- an entry failing deterministically backs off, 5 s doubling to 5 min; Redis being
  away does not back off (rule 5) and ends the tick early; one entry failing never
  stops the others (rule 6);
- ``PERIODIC_CATCH_UP`` off: on this process's first look at an entry, a slot that
  passed ``PERIODIC_GRACE`` or more before this process *started* is not fired (said
  once, unless another process fired it); one that passed less than that before the
  start (a restart's gap), or came due after it, fires, however long the first tick
  waited (the first tick waits for the first orphan pass, tens of seconds at the
  production timings); on: the latest missed slot fires once;
- database entries (source.py): each tick reads ``P:periodic:version`` (one GET) and,
  when it moved, has the table read again; their claims carry that version as a fence,
  so a change seen late fires nothing it removed ("stale": looked at again next tick);
  an entry's slots before its last change are not its own (``Entry.due``);
- publish the schedule to ``P:periodic:schedule`` for the admin (best-effort, again
  whenever the entries change).
The ticker runs until the process exits: the launcher stops it after the drain, so a
slot that comes due while the worker is quiet or stopping still fires (rule 16).
The first tick waits for the first orphan recovery pass, so jobs of processes found
dead then are requeued before this process fires anything (a requeued until_executed
run takes its running lock back when a worker starts it, or waits for the run holding
it: docs/periodic.md).
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .. import conf
from ..core import locks
from ..store import connection, errors, keys, scripts
from . import claims, entries, running_lock, source
from .entries import Entry

log = logging.getLogger("cogworker_django")

# Backoff of an entry (or a rollback) that fails deterministically: 5 s doubling to 5 min.
BACKOFF_FIRST = 5.0
BACKOFF_MAX = 300.0
# A slot blocked by a running lock is retried this many heartbeats before it is skipped:
# the process that ran the job retries a deferred release on every beat.
BLOCKED_GRACE_BEATS = 3
# While a read of the database's entries that a tick waits for is under way, the chore
# looks again this often (the chores thread is never held up by a database).
READ_POLL = 0.05
# The per-slot NX lock lives until the entry's next slot, plus this margin for clock
# skew between hosts: after that no process computes this slot as the latest one.
SLOT_LOCK_MARGIN = 60


@dataclass(frozen=True)
class Claim:
    code: str  # "claimed", "taken", "blocked", "disabled" or "stale"
    detail: str  # previous last_slot ("claimed") or the lock holder ("blocked")
    disabled_unreadable: bool


@dataclass(frozen=True)
class Rollback:
    entry: Entry
    slot: int
    previous: str
    jid: str  # the running lock's owner ("" unless until_executed)
    claim_jid: str  # the job the claim was made for (its record names it)
    owner: str  # the identity whose claim record it is


def claim(
    conn: Any,
    entry: Entry,
    slot: int,
    job: dict[str, Any],
    now: float,
    identity: str,
    fence: str = "",
) -> Claim:
    """Run lua/periodic_claim.lua for ``slot`` of ``entry``; the claim carries ``job``
    (claims.py) until it is pushed. ``fence``: the version of the database entries the
    caller runs ("" for none: a settings entry), refused as "stale" once it moved."""
    lock_ttl = max(1, math.ceil(entry.schedule.next(slot) - now)) + SLOT_LOCK_MARGIN
    code, detail, unreadable = scripts.run(
        "periodic_claim",
        conn,
        [
            keys.periodic_disabled(),
            keys.periodic_last_slot(entry.name),
            keys.periodic_lock(entry.name, slot),
            keys.periodic_running(entry.name),
            keys.periodic_claims(identity),
            keys.periodic_claimers(),
            keys.periodic_version(),
        ],
        [
            entry.name,
            slot,
            lock_ttl,
            "1" if entry.until_executed else "",
            job["jid"],
            running_lock.claim_ttl(),
            claims.field(entry.name, slot),
            claims.record(job),
            identity,
            fence if entry.source == entries.DATABASE else "",
        ],
    )
    return Claim(connection.text(code), connection.text(detail), connection.text(unreadable) == "1")


def rollback(conn: Any, rb: Rollback) -> int:
    """Run lua/periodic_rollback.lua (raises if Redis does not take it): 1 when undone;
    0 when there was nothing to undo (the claim's record is gone: its push went through,
    or an earlier try of this rollback did); 2 when the record was marked "pushing" (its
    push may have happened: dropped, nothing undone)."""
    name = rb.entry.name
    done = scripts.run(
        "periodic_rollback",
        conn,
        [
            keys.periodic_last_slot(name),
            keys.periodic_lock(name, rb.slot),
            keys.periodic_running(name),
            keys.periodic_claims(rb.owner),
        ],
        [rb.slot, rb.previous, rb.jid, claims.field(name, rb.slot), rb.claim_jid],
    )
    return int(done)


class Ticker:
    """The periodic entries' firing: :meth:`announce` at start, :meth:`run` every
    ``interval`` (a chore of the worker's chores thread, which goes on until the drain
    ends: rule 16), :meth:`close` once the chores have stopped; :meth:`tick` is one pass."""

    def __init__(
        self,
        entries: Iterable[Entry],
        *,
        database: source.DatabaseEntries | None = None,
        ready: Callable[[], bool] = lambda: True,
        catch_up: bool | None = None,
        started_at: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        identity: str | None = None,
    ) -> None:
        s = conf.get()
        # Whose claim records this ticker writes (claims.py): the worker's identity, so
        # orphan recovery finds them when it finds the worker dead.
        self.identity = identity or f"ticker:{secrets.token_hex(6)}"
        self._renamed: str | None = None  # (rename)
        # When the process started (epoch seconds): with catch-up off, only slots due
        # before this count as missed. The launcher passes its own start; tests driving
        # tick(now) with a fixed clock pass theirs.
        self.started_at = time.time() if started_at is None else started_at
        # The settings' entries and the database's (``database``: None for none).
        self.schedule = source.Schedule(entries, database)
        self._fence = ""  # the version of the database entries this tick runs
        self.ready = ready
        self.catch_up = s.PERIODIC_CATCH_UP if catch_up is None else catch_up
        self.interval = s.PERIODIC_TICK
        self.blocked_grace = BLOCKED_GRACE_BEATS * s.HEARTBEAT_INTERVAL
        # Catch-up off: at this process's first look at an entry, its due slot fires if
        # it passed less than this before the process started (docs/periodic.md).
        self.restart_grace = s.PERIODIC_GRACE
        self._ticking = False  # a tick is under way (close: its claims may be in flight)
        self._published: list[Entry] | None = None  # the entries last published
        self._done: dict[str, int] = {}  # entry -> the slot this process is done with
        self._seen: set[str] = set()  # entries looked at once (catch-up)
        self._blocked: dict[str, tuple[int, float]] = {}  # entry -> (slot, first seen)
        self._rollbacks: dict[str, Rollback] = {}  # entry -> its pending rollback
        # entry -> (slot, job) of a claim whose reply was lost: pushed if it had run
        self._unconfirmed: dict[str, tuple[int, dict]] = {}
        # Entries (and "rollback:<entry>") failing deterministically; ``clock`` is for
        # tests that let a backoff run out without waiting for it.
        self._backoff = errors.Backoff(BACKOFF_FIRST, BACKOFF_MAX, clock)
        self._disabled_unreadable = False

    @property
    def entries(self) -> list[Entry]:
        return self.schedule.entries

    # Lifecycle ---------------------------------------------------------------------------

    def announce(self) -> None:
        """The start's periodic line: the entries, and what a restart does to a slot."""
        db = self.schedule.database
        if db is not None:
            # The table's first read, so the line counts its entries (not waited for
            # longer than LOAD_WAIT: a database that hangs delays nothing else).
            target = db.request("")
            if target is not None:
                db.wait(target)
        settings_count, db_count = self.schedule.counts()
        rule = (
            "the latest slot missed while no worker ran fires at start (PERIODIC_CATCH_UP)"
            if self.catch_up
            else "a slot missed while no worker ran fires at start when less than "
            f"{self.restart_grace:g}s late (PERIODIC_GRACE)"
        )
        log.info(
            "periodic: %d entries from COGWORKER_PERIODIC, %d from the database%s; a slot "
            "due while this worker is quiet or stopping still fires; %s",
            settings_count,
            db_count,
            " (unreadable now: read again every tick)" if db is not None and db.failing else "",
            rule,
        )

    def close(self) -> None:
        """Once the chores have stopped (a tick still under way, its thread not ended in
        time, keeps this process's claimer entry listed)."""
        if self.schedule.database is not None:
            self.schedule.database.stop()
        if self._rollbacks:
            # Last chance: a pending rollback lives in this process's memory only.
            errors.best_effort("Periodic rollback", lambda: self._retry_rollbacks(force=True))
        if not self._ticking:
            # No claim left to push: nothing for orphan recovery to find under this
            # identity. (A record left, from a rollback still failing, keeps it listed:
            # recovery pushes that slot's job once this process has missed the threshold.)
            errors.best_effort("Periodic claim", self._forget, "claimer not unlisted")

    def _forget(self) -> None:
        conn = connection.get_client()
        if conn.hlen(keys.periodic_claims(self.identity)) == 0:
            conn.srem(keys.periodic_claimers(), self.identity)

    def rename(self, identity: str) -> None:
        """The process carries on as ``identity`` (it was fenced): taken at the next
        tick, so no slot is claimed under one identity and pushed under the other."""
        self._renamed = identity

    def run(self, conn: Any = None) -> float:
        """One pass once orphan recovery has run once (a dead process's claimed slots are
        pushed before this one claims); the seconds until the next (a moment, while a
        read of the database's entries it waits for is under way)."""
        if not self.ready():
            return self.interval
        self._ticking = True
        try:
            if self.tick(block=False) is False:
                return READ_POLL
        except Exception as exc:  # noqa: BLE001 - the next tick comes all the same
            errors.report("Periodic tick", exc)
        finally:
            self._ticking = False
        return self.interval

    # One pass ----------------------------------------------------------------------------

    def tick(self, now: float | None = None, block: bool = True) -> bool:
        """Fire every due entry once; ``now`` (epoch) is for tests with a fixed clock.
        ``block`` False: False (nothing done) while a read of the database's entries
        it waits for is under way (Schedule.refresh); else True."""
        if self._renamed is not None:
            # The old identity's claimer entry goes once it holds no claim (a record
            # left is pushed by orphan recovery, as a dead process's).
            errors.best_effort("Periodic claim", self._forget, "claimer not unlisted")
            self.identity, self._renamed = self._renamed, None
        # This process's own delayed releases first: see BLOCKED_GRACE_BEATS.
        locks.retry_deferred()
        conn = connection.get_client()
        try:
            fence = self.schedule.refresh(conn, block)
        except Exception as exc:  # noqa: BLE001 - only an outage gets here
            errors.report("Periodic tick", exc, "retrying next tick")
            return True  # every claim would fail the same way
        if fence is None:
            return False
        self._fence = fence
        if self.schedule.database is not None:
            errors.recovered("Periodic tick")  # it read the version key
        if self._published != self.entries:
            self.publish(conn)
        if not self._retry_rollbacks():
            return True  # Redis is away
        for entry in self.entries:
            name = entry.name
            if name in self._rollbacks or self._backing_off(name):
                continue
            try:
                if name in self._unconfirmed:
                    self._settle_unconfirmed(conn, entry)
                talked = self._tick_entry(conn, entry, time.time() if now is None else now)
            except Exception as exc:  # noqa: BLE001 - rule 6: one entry never stops the others
                if errors.is_unavailable(exc):
                    errors.report("Periodic tick", exc, f"{name}: retrying next tick")
                    return True  # the rest would fail the same way; no backoff (rule 5)
                delay = self._back_off(name)
                errors.report("Periodic tick", exc, f"{name} (next try in {delay:.0f}s)")
                continue
            self._backoff.succeeded(name)
            if talked:
                errors.recovered("Periodic tick")
        return True

    def _tick_entry(self, conn: Any, entry: Entry, now: float) -> bool:
        """One entry; returns whether it talked to Redis."""
        name = entry.name
        slot = entry.due(now)
        if slot is None or self._done.get(name) == slot:
            return False
        first_look = name not in self._seen
        self._seen.add(name)
        late = self.started_at - slot  # > 0: it passed before this process started
        if first_look and not self.catch_up and late > 0 and late >= self.restart_grace:
            self._done[name] = slot
            self._say_missed(conn, entry, slot)
            return True
        job = entry.build_job(slot=slot)
        try:
            result = claim(conn, entry, slot, job, now, self.identity, self._fence)
        except Exception as exc:
            if errors.is_unavailable(exc):
                # The script may have run and only its reply been lost (a connection cut
                # by a restart or failover): if it did, this slot is this process's to
                # push, with this job, once Redis answers (_settle_unconfirmed).
                self._unconfirmed[name] = (slot, job)
            raise
        if result.code == "stale":
            # A database entry changed since this tick read them: nothing was written;
            # the next tick reads them again (the version differs) and looks again.
            if first_look:
                self._seen.discard(name)
            return True
        self._note_disabled_readable(not result.disabled_unreadable)
        if result.code == "claimed":
            self._push(conn, entry, slot, job, result.detail)
        elif result.code == "blocked":
            if self._in_grace(name, slot):
                return True  # not done with it: look again next tick
            log.info(
                "periodic %s: slot %s skipped: the previous run (%s) still holds the "
                "until_executed lock",
                name,
                _iso(slot),
                result.detail,
            )
        self._done[name] = slot
        self._blocked.pop(name, None)
        return True

    def _settle_unconfirmed(self, conn: Any, entry: Entry) -> None:
        """A claim whose reply never came: the per-slot lock holds the jid of the claim
        that won the slot, so it tells whether this process's claim ran. If it did, the
        slot is this process's: push its job now (and confirm the running lock), as the
        claim's caller would have; if it did not, nothing was claimed and the entry is
        looked at as usual. Raises while Redis is still away (kept for the next tick)."""
        slot, job = self._unconfirmed[entry.name]
        # The claim script writes the slot lock and the claim record together: either
        # names this claim's job if it ran (the lock lapses at the next slot, the record
        # stays until pushed).
        pipe = conn.pipeline(transaction=False)
        pipe.get(keys.periodic_lock(entry.name, slot))
        pipe.hget(keys.periodic_claims(self.identity), claims.field(entry.name, slot))
        holder, held = pipe.execute(raise_on_error=False)
        if isinstance(holder, Exception) and errors.is_unavailable(holder):
            raise holder
        del self._unconfirmed[entry.name]
        ran = (
            isinstance(holder, (str, bytes)) and connection.text(holder) == job["jid"]
        ) or claims.names(held, job["jid"])
        if not ran:
            return  # the claim did not run (or another process's won the slot)
        log.warning(
            "periodic %s: the claim of slot %s went through though its reply was lost: "
            "pushing its job now",
            entry.name,
            _iso(slot),
        )
        self._done[entry.name] = slot
        self._push(conn, entry, slot, job, "")

    def _push(self, conn: Any, entry: Entry, slot: int, job: dict, previous: str) -> None:
        jid = job["jid"]
        try:
            pushed, gone = claims.push(conn, self.identity, claims.field(entry.name, slot), job)
        except Exception:
            running = jid if entry.until_executed else ""
            rb = Rollback(entry, slot, previous, running, jid, self.identity)
            self._rollback(conn, rb)
            raise
        if gone:
            # Not this process's to push any more (orphan recovery took its claim: it was
            # judged dead, which rule 13 keeps from happening to a live process).
            log.warning("periodic %s: slot %s was pushed by another process", entry.name, slot)
            return
        if pushed is None:
            # A client middleware (or the job's own unique lock) refused it: the slot is
            # used up, but the running lock taken for it must not wait out its TTL.
            if entry.until_executed:
                locks.release(keys.periodic_running(entry.name), jid, "Periodic lock")
            log.info("periodic %s: slot %s not enqueued (refused at push)", entry.name, slot)
            return
        if entry.until_executed:
            # Only now that the job exists does its lock get the queued TTL; if this
            # write fails the lock lapses after the claim TTL while the job waits, and
            # the run takes it back when it starts (RunningLockMiddleware).
            key = keys.periodic_running(entry.name)
            errors.best_effort(
                "Periodic lock", lambda: running_lock.confirm(conn, key, jid), f"{key} TTL"
            )
        log.debug("periodic %s: slot %s enqueued as %s", entry.name, _iso(slot), jid)

    def _say_missed(self, conn: Any, entry: Entry, slot: int) -> None:
        """Catch-up off, first look: ``slot`` passed PERIODIC_GRACE or more before this
        process started. Said once (INFO), unless another process fired it (then it was
        not missed: nothing to say)."""
        try:
            last = conn.get(keys.periodic_last_slot(entry.name))
            fired = last is not None and float(connection.text(last)) >= slot
        except Exception as exc:
            if errors.is_unavailable(exc):
                self._done.pop(entry.name, None)
                self._seen.discard(entry.name)
                raise  # looked at again next tick
            fired = False  # unreadable: say it
        if not fired:
            log.info(
                "periodic %s: slot %s was missed (no worker ran then) and passed more than "
                "PERIODIC_GRACE (%gs) before this worker started; not fired "
                "(PERIODIC_CATCH_UP is off)",
                entry.name,
                _iso(slot),
                self.restart_grace,
            )

    def _in_grace(self, name: str, slot: int) -> bool:
        now = time.monotonic()
        seen = self._blocked.get(name)
        if seen is None or seen[0] != slot:
            self._blocked[name] = (slot, now)
            return True
        return now - seen[1] < self.blocked_grace

    def _note_disabled_readable(self, readable: bool) -> None:
        # Logged once until it is readable again: checked on every claim.
        if not readable and not self._disabled_unreadable:
            log.error(
                "%s can't be read (wrong type?): every periodic entry counts as enabled",
                keys.periodic_disabled(),
            )
        self._disabled_unreadable = not readable

    # Rollbacks and backoff ---------------------------------------------------------------

    def _rollback(self, conn: Any, rb: Rollback) -> Exception | None:
        """Try ``rb`` now; kept for later when it fails. Returns the error, if any."""
        try:
            undone = rollback(conn, rb)
        except Exception as exc:  # noqa: BLE001 - kept and retried
            self._rollbacks[rb.entry.name] = rb
            errors.report(
                "Periodic rollback",
                exc,
                f"{rb.entry.name}: claim of slot {rb.slot} not rolled back yet (will retry)",
            )
            return exc
        self._rollbacks.pop(rb.entry.name, None)
        errors.recovered("Periodic rollback")
        if undone == 0:
            log.warning(
                "periodic %s: slot %s had nothing to undo: its push went through though its "
                "reply was lost (or an earlier try of this rollback did)",
                rb.entry.name,
                _iso(rb.slot),
            )
        elif undone == 2:
            log.warning(
                "periodic %s: slot %s not rolled back: its push may have gone through (not "
                "tried again, so it is never pushed twice)",
                rb.entry.name,
                _iso(rb.slot),
            )
        return None

    def _retry_rollbacks(self, force: bool = False) -> bool:
        """Retry pending rollbacks; False when Redis is away. One failing on its own backs
        off like an entry (its entry waits for it)."""
        if not self._rollbacks:
            return True
        conn = connection.get_client()
        for name, rb in list(self._rollbacks.items()):
            key = f"rollback:{name}"
            if not force and self._backing_off(key):
                continue
            exc = self._rollback(conn, rb)
            if exc is None:
                self._backoff.succeeded(key)
            elif errors.is_unavailable(exc):
                return False
            else:
                self._back_off(key)
        return True

    def _backing_off(self, key: str) -> bool:
        return not self._backoff.ready(key)

    def _back_off(self, key: str) -> float:
        return self._backoff.failed(key)

    def backoff_remaining(self, name: str) -> float:
        """Seconds before ``name`` is looked at again (0 when it is not backing off)."""
        return self._backoff.remaining(name)

    # The published schedule --------------------------------------------------------------

    def publish(self, conn: Any | None = None) -> bool:
        """Write the entries to ``P:periodic:schedule`` (and drop names no longer
        configured); best-effort: failing to publish never stops the process."""
        conn = conn or connection.get_client()
        key = keys.periodic_schedule()
        current = self.entries

        def write() -> None:
            names = {e.name for e in current}
            stale = {connection.text(k) for k in conn.hkeys(key)} - names
            pipe = conn.pipeline(transaction=True)
            if current:
                pipe.hset(key, mapping={e.name: json.dumps(e.as_dict()) for e in current})
            if stale:
                pipe.hdel(key, *stale)
            pipe.execute()

        done = errors.best_effort("Periodic schedule", write, f"{key} not published")
        if done:
            self._published = current
        return done


def _iso(slot: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(slot))
