"""Orphan recovery: the jobs of processes that died are run again by the living.

(Over 400 lines: the threshold's pass and the lifeline judge the same processes on the
same clocks and recover them by the same path, kept together.)

Each of a dead process's jobs is moved back to its queue with ``orphan_count`` + 1 by
one script per job that removes it from the dead process's list and pushes it only if
it was still there, so two recoverers never requeue it twice. Past ``MAX_ORPHANINGS``
the job goes to dead instead (a job that kills its worker must not kill the fleet
forever). Its limiter leases are freed (controls/limits.py: a dead process's concurrency
slots are never wedged), and the periodic slots it claimed but never pushed are pushed
(periodic/claims.py). Then the identity is forgotten. A process never recovers its own list: it
trusts its own record (the heartbeat's reconcile handles lost fetch replies).

Who is dead (rule 13: nobody is an orphan because Redis was away or the machine was
busy). All times are on Redis's clock (``TIME``; this host's clock where it is
refused). The checker keeps ``clear_since``, the time since which it has seen Redis
answer without a break (``heartbeat.Clearance``: reset at its own start, by a failed
beat, and by a gap between two of its answers longer than ``stall_gap``). A process X
is dead only when its presence key is gone and

    now - max(last_beat[X], clear_since) >= ORPHAN_THRESHOLD

so X has missed its beats for a full threshold during which Redis answered the
checker. X without a readable stamp is measured from when this checker first saw it
so, instead of counting as dead at once. Stamps are whole seconds (floored): a stamp
is taken for the end of its second.

Why it holds when either side is starved of CPU: a starved checker makes no answers,
so its starvation shows as a gap and restarts ``clear_since`` when it resumes; a
stalled Redis answers nobody, so the same gap shows. Either way every other process
gets a full threshold, from the moment the checker could watch again, to get one beat
through. What remains is a process starved on its own for a whole threshold while
Redis and the checker ran: it is taken for dead (its jobs run again), which is what
``ORPHAN_THRESHOLD`` bounds. A pass outside a clear stretch (beats failing, or a
break just seen) judges nobody and is retried at the next poll.

The lifeline: a killed process is known gone well before a threshold. Each worker names
its connections after its identity (store/naming.py) and says so in its presence key;
the kernel closes a killed process's sockets at once, while a stalled one (SIGSTOP, a
starved host, Redis paused) keeps them. So every ``lifeline_pause()`` a worker reads the
stamps (one round trip), and a process X is gone at once when

    now - max(last_beat[X] + 1, clear_since, beating_since, server start) >= LATE_BEATS * HEARTBEAT_INTERVAL

(``beating_since``: since when this checker's own beats went through on time, so a
``CLIENT PAUSE WRITE`` that holds every beat judges nobody; the server's start, from
``INFO``'s uptime, so a restart that dropped every connection and restored old stamps
judges nobody either; a listed process without a stamp, its stamp lost with the stamps'
hash, is late from when this checker first saw it so), its presence named its
connections when this checker first saw it stamped or listed (a worker of an older
release or behind a proxy names none: threshold only; the name is kept while it is
either, so a killed process whose presence lapsed before it could be judged, a Redis
restart having moved the start of its lateness on, is still found), that name is on no connection in ``CLIENT LIST`` while this checker's
own name is (else names don't show here: a proxy; nobody judged), and when the server
closes idle clients (``timeout``), X is late by that much more too. Where it can't see (no names, a cluster, a partition that left X's
sockets open on the server) the threshold rule above still holds.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import redis

from .. import conf
from ..controls import limits
from ..periodic import claims
from ..store import codec, errors, homes, keys, naming
from ..store.codec import raw_text as text
from .heartbeat import redis_seconds
from .requeue import requeue_from_list

log = logging.getLogger("cogworker_django")

# The lifeline takes a process for gone once its beat is this many intervals late and
# none of its connections is left on the server (module docstring).
LATE_BEATS = 2


def lifeline_pause() -> float:
    """Between two lifeline passes: 0.4 heartbeat intervals, jittered (2 s by default,
    so a killed process's jobs are back within LATE_BEATS intervals plus about 3 s)."""
    return conf.get().HEARTBEAT_INTERVAL * 0.4 * random.uniform(0.75, 1.25)


def redis_now(conn: Any) -> float:
    """Redis's clock (last beats are stamped with it); this host's clock where ``TIME``
    is refused (some proxies and managed services), as the heartbeat does."""
    try:
        return redis_seconds(conn.time())
    except redis.ResponseError:
        return time.time()


def stamp_of(beat: Any) -> float | None:
    """A last-beat stamp, or None when missing or unreadable."""
    return codec.number(beat)


class OrphanRecovery:
    def __init__(self, identity: str, heartbeat: Any, fallback_queue: str) -> None:
        self.identity = identity
        self.heartbeat = heartbeat
        self.fallback_queue = fallback_queue
        self.completed_once = False
        # Identity -> when (Redis clock) this checker first saw it without a stamp.
        self._unstamped: dict[str, float] = {}
        # Identities logged as missing (no presence, not yet recoverable): logged once.
        self._missing: set[str] = set()
        # Periodic slots dead processes claimed and never pushed: pushed off this thread.
        self.claims = claims.RecoveryPusher()
        # Registries found of the wrong type (logged once until readable again).
        self._unreadable: set[str] = set()
        # The lifeline found this process's own name missing from CLIENT LIST (logged once).
        self._names_hidden = False
        # Identity -> the name its connections carry ("" unnamed), as its presence said
        # when this checker first saw it stamped or listed; kept while it is either. Presence
        # lasts four beats, the lifeline needs two from the server's start: a process
        # killed just before a Redis restart has lost its presence by the time it can be
        # judged, and its name is still what to look for (the module docstring).
        self._names: dict[str, str] = {}

    def _note_missing(self, conn: Any, ident: str, last: float, due: float, now: float) -> None:
        """Log once per silence when a process with an in-progress list has stopped
        beating (its presence key is gone) but is not yet recoverable: until then its jobs
        show nowhere else (the admin's Processes page lists them as awaiting recovery)."""
        if now - last < 4 * conf.get().HEARTBEAT_INTERVAL:
            self._missing.discard(ident)  # beating again: its next silence is logged anew
            return
        if ident in self._missing or conn.exists(keys.process(ident)):
            return  # logged already, or present (no need to log)
        self._missing.add(ident)
        log.warning(
            "process %s is missing (no beat for %.0fs): its %d job(s) are recovered from "
            "about %.0fs from now, once it has missed ORPHAN_THRESHOLD",
            ident,
            now - last,
            self._listed_jobs(conn, ident),
            max(0.0, due - now),
        )

    def _listed_jobs(self, conn: Any, ident: str) -> int:
        """How many jobs ``ident``'s in-progress lists hold, over every home."""
        return sum(
            int(conn.llen(keys.inprogress(ident, home)))
            for home in homes.process_homes(conn, ident, [self.fallback_queue])
        )

    def run(self, conn: Any) -> int | None:
        """One pass; returns how many jobs it moved, or None when it did not judge: this
        process has seen no clear stretch of Redis answering since its last break (its
        beats are failing, or a stall just ended: the next good beat starts one)."""
        clearance = self.heartbeat.clearance
        try:
            now = redis_now(conn)
        except Exception as exc:
            if errors.is_unavailable(exc):
                clearance.broken()
            raise
        clear_since = clearance.answered(now)
        if clear_since is None:
            return None
        threshold = conf.get().ORPHAN_THRESHOLD
        ids = self._listed(conn)
        beats = {text(k): v for k, v in conn.hgetall(keys.last_beat()).items()}
        self._prune_stamps(conn, beats, set(ids), now, threshold)
        for gone in set(self._unstamped) - set(ids):
            del self._unstamped[gone]
        self._missing &= set(ids)
        moved = 0
        for ident in ids:
            if ident == self.identity:
                continue
            last = stamp_of(beats.get(ident))
            if last is None:
                last = self._unstamped.setdefault(ident, now)
            else:
                self._unstamped.pop(ident, None)
                last += 1.0  # whole seconds, floored: the beat may be up to 1 s later
            if now - max(last, clear_since) < threshold:
                self._note_missing(conn, ident, last, max(last, clear_since) + threshold, now)
                continue
            self._missing.discard(ident)
            try:
                moved += self._recover(conn, ident)
            except Exception as exc:  # noqa: BLE001 - one identity never stops the others
                if errors.is_unavailable(exc):
                    raise
                log.error("orphan recovery of %s failed: %s", ident, errors.describe(exc))
        self.completed_once = True
        return moved

    def lifeline(self, conn: Any) -> float:
        """One lifeline pass (module docstring): the jobs of processes found gone are
        requeued now. Returns the pause until the next. Costs one round trip (``TIME``,
        ``HGETALL`` of the stamps) while nobody is late; ``INFO``, the late processes'
        presence and ``CLIENT LIST`` only when someone is."""
        pause = lifeline_pause()
        own = naming.current()
        if not own:
            return pause  # this process's connections carry no name: nothing to compare
        read = self._watch(conn)
        if read is None:
            return pause
        now, beats, listed = read
        self._learn_names(conn, set(beats) | listed)
        watched = self._watched_since(now)
        if watched is None:
            return pause
        late = LATE_BEATS * conf.get().HEARTBEAT_INTERVAL
        late_ones = self._late_ones(beats, listed, now, watched, late)
        if late_ones:
            for ident in self._gone(conn, late_ones, now, late, own):
                self._recover_gone(conn, ident, now - late_ones[ident])
        return pause

    @staticmethod
    def _watch(conn: Any) -> tuple[float, dict[str, Any], set[str]] | None:
        """Redis's clock, the stamps (identity -> stamp) and the processes listed with
        jobs in progress or periodic claims, in one round trip; None when the clock or
        the stamps can't be read (``TIME`` refused by a proxy, where names don't show
        either; a stamps hash of the wrong type, until the key guard moves it aside). A
        listing set of the wrong type counts as empty (the threshold's pass logs it)."""
        pipe = conn.pipeline(transaction=False)
        pipe.time()
        pipe.hgetall(keys.last_beat())
        pipe.smembers(keys.inprogress_ids())
        pipe.smembers(keys.periodic_claimers())
        clock, beats, *listings = pipe.execute(raise_on_error=False)
        if isinstance(clock, Exception) or isinstance(beats, Exception):
            return None
        listed: set[str] = set()
        for members in listings:
            if not isinstance(members, Exception):
                listed |= {text(m) for m in members}
        return redis_seconds(clock), {text(k): v for k, v in beats.items()}, listed

    def _watched_since(self, now: float) -> float | None:
        """Since when this process has both seen Redis answer without a break and got its
        own beats through on time; None while either is not the case."""
        clearance = self.heartbeat.clearance
        since = clearance.answered(now)
        beating = clearance.beating_since
        if since is None or beating is None:
            return None
        return max(since, beating)

    def _late_ones(
        self, beats: dict[str, Any], listed: set[str], now: float, watched: float, late: float
    ) -> dict[str, float]:
        """The other processes whose stamp is ``late`` old, counted from ``watched`` at the
        earliest: identity -> the end of its last beat's second. A listed process without
        a readable stamp (the stamps' hash was overwritten and moved aside, say: the live
        stamp again at their next beat) is timed from when this checker first saw it so,
        as the threshold's pass does."""
        found = {}
        for ident in set(beats) | listed:
            if ident == self.identity:
                continue
            stamp = stamp_of(beats.get(ident))
            if stamp is not None:
                last = stamp + 1.0  # whole seconds, floored
            elif ident in listed:
                last = self._unstamped.setdefault(ident, now)
            else:
                continue  # an unreadable stamp of a process with nothing to recover
            if now - max(last, watched) >= late:
                found[ident] = last
        return found

    def _gone(
        self, conn: Any, late_ones: dict[str, float], now: float, late: float, own: str
    ) -> list[str]:
        """Which of the late processes (identity -> last beat) have no connection left."""
        names = self._named(sorted(late_ones))
        if not names:
            return []
        # Late relative to the server's own start too (a restart drops every connection
        # and may restore old stamps), and to its idle-client timeout.
        node = naming.server(conn, keys.last_beat())
        started = now - float(node.info("server").get("uptime_in_seconds", 0))
        late += self._idle_timeout(node)
        names = {i: n for i, n in names.items() if now - max(late_ones[i], started) >= late}
        if not names:
            return []
        present = naming.named_clients(conn)
        if not self._names_show(present, own):
            return []
        return [i for i, name in names.items() if name not in present]

    def _learn_names(self, conn: Any, seen: set[str]) -> None:
        """The names of the processes stamped or listed that this checker has not seen
        yet, from their presence (one round trip, only when there are such); a process
        without presence is asked again on the next pass. Names of processes neither
        stamped nor listed any more are forgotten."""
        seen = seen - {self.identity}
        for gone in set(self._names) - seen:
            del self._names[gone]
        new = sorted(seen - set(self._names))
        if not new:
            return
        pipe = conn.pipeline(transaction=False)
        for ident in new:
            pipe.hget(keys.process(ident), "client")
        for ident, name in zip(new, pipe.execute(), strict=True):
            if name is not None:  # "" for a process that names nothing: kept so
                self._names[ident] = text(name)

    def _named(self, idents: list[str]) -> dict[str, str]:
        """Those of ``idents`` whose presence named their connections: identity -> name
        (a worker of an older release, or behind a proxy, names nothing)."""
        return {i: self._names[i] for i in idents if self._names.get(i)}

    def _names_show(self, present: set[str], own: str) -> bool:
        """Whether CLIENT LIST shows this process's own name: where it doesn't (a proxy
        that answers with its own connections), nobody's absence means anything."""
        if own in present:
            self._names_hidden = False
            return True
        if not self._names_hidden:
            self._names_hidden = True
            log.warning(
                "orphan recovery: this process's own connections are not named in "
                "CLIENT LIST (a proxy?): dead processes are found by ORPHAN_THRESHOLD only"
            )
        return False

    @staticmethod
    def _idle_timeout(conn: Any) -> float:
        """The server's ``timeout`` (it closes clients idle that long: a stalled process's
        connections too); 0 when it closes none or won't say."""
        try:
            return float(conn.config_get("timeout").get("timeout", 0) or 0)
        except redis.ResponseError:
            return 0.0  # CONFIG refused (managed services): their default, none

    def _recover_gone(self, conn: Any, ident: str, silent: float) -> None:
        log.warning(
            "process %s is gone (no beat for %.0fs and no connection left on Redis): its "
            "jobs are recovered now",
            ident,
            silent,
        )
        # Its presence goes first: it is dead, and the admin must not show it alive.
        conn.delete(keys.process(ident))
        try:
            self._recover(conn, ident)
        except Exception as exc:  # noqa: BLE001 - one identity never stops the others
            if errors.is_unavailable(exc):
                raise
            log.error("orphan recovery of %s failed: %s", ident, errors.describe(exc))

    def _listed(self, conn: Any) -> list[str]:
        """Processes with in-progress lists, and those that claimed periodic slots (kept
        apart: a worker of an older release forgets the first set's members only). One
        set of the wrong type is logged (rule 5: once) and the other still read (rule 6);
        the key guard moves it aside."""
        pipe = conn.pipeline(transaction=False)
        pipe.smembers(keys.inprogress_ids())
        pipe.smembers(keys.periodic_claimers())
        listed: set[str] = set()
        for key, members in zip(
            (keys.inprogress_ids(), keys.periodic_claimers()),
            pipe.execute(raise_on_error=False),
            strict=True,
        ):
            if not isinstance(members, Exception):
                listed |= {text(m) for m in members}
                self._unreadable.discard(key)
            elif errors.is_unavailable(members):
                raise members
            elif key not in self._unreadable:
                self._unreadable.add(key)
                log.error("orphan recovery can't read %s: %s", key, errors.describe(members))
        return sorted(listed)

    @staticmethod
    def _prune_stamps(
        conn: Any, beats: dict[str, Any], listed: set[str], now: float, threshold: float
    ) -> None:
        """Drop last-beat stamps of processes listed nowhere that have not beaten for a
        threshold (basic-fetch workers killed without claims leave one): a live process
        writes its stamp again on its next beat, so nothing is lost by dropping it."""
        stale = []
        for ident, beat in beats.items():
            last = stamp_of(beat)
            if ident not in listed and (last is None or now - last > threshold):
                stale.append(ident)
        if stale:
            errors.best_effort("Orphan recovery", lambda: conn.hdel(keys.last_beat(), *stale))

    def _recover(self, conn: Any, ident: str) -> int:
        if conn.exists(keys.process(ident)):
            return 0  # alive (its stamp may be failing while its presence works)
        # Its stamp goes first: should it be alive after all (stalled past the threshold),
        # its next beat finds the stamp gone and fences its runs (heartbeat.py) before
        # they settle what is moved below. (A pass that fails from here on leaves it
        # unstamped: the next waits a threshold from then, never less.)
        conn.hdel(keys.last_beat(), ident)
        moved = 0
        for home in homes.process_homes(conn, ident, [self.fallback_queue]):
            raws = [text(r) for r in conn.lrange(keys.inprogress(ident, home), 0, -1)]
            if raws:
                moved += requeue_from_list(
                    conn,
                    ident,
                    dict.fromkeys(raws),
                    home=home,
                    count_orphaning=True,
                    fallback_queue=homes.a_queue_of(home, self.fallback_queue),
                )
        if moved:
            log.warning("recovered %d job(s) from dead process %s", moved, ident)
        try:
            freed = limits.free_leases_of(conn, ident)
        except Exception as exc:
            if errors.is_unavailable(exc):
                raise
            log.error("leases of dead process %s not freed: %s", ident, errors.describe(exc))
            freed = 0
        if freed:
            log.warning("freed %d limiter lease(s) of dead process %s", freed, ident)
        # Periodic slots it claimed and died before pushing: pushed (late, not lost) by
        # their own thread, which runs the client middleware; the identity is forgotten
        # on a pass that finds none left.
        if claims.pending(conn, ident):
            self.claims.submit(ident)
        elif self._listed_jobs(conn, ident) == 0:
            # Forget the dead identity everywhere (its presence key is already gone).
            pipe = conn.pipeline(transaction=False)
            pipe.srem(keys.inprogress_ids(), ident)
            pipe.srem(keys.periodic_claimers(), ident)
            pipe.hdel(keys.last_beat(), ident)
            pipe.srem(keys.processes(), ident)
            pipe.delete(keys.work(ident))
            # (Written only with a home per queue; deleting it where it never was costs
            # nothing, and this pass need not know which.)
            pipe.delete(keys.inprogress_homes(ident))
            pipe.execute(raise_on_error=False)
            self._unstamped.pop(ident, None)
        return moved


__all__ = ["OrphanRecovery", "requeue_from_list"]
