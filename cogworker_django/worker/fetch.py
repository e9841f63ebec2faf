"""The fetch strategies: everything that differs by fetch mode, behind one interface.

(Over 400 lines: both strategies and everything each owns, side by side, so that a
difference of mode has one place.)

``ReliableFetch`` (default) moves a job atomically into this process's in-progress list,
so a process that dies mid-job leaves it there for orphan recovery; acking finished jobs
and fetching the next ones are one round trip, shared by the process's threads
(dispatch.py). ``BasicFetch`` is one blocking BRPOP per thread: a job taken by a process
that dies is lost (Redis < 6.2, or ``FETCH="basic"``).

Each strategy owns, for its mode:

- taking jobs: :meth:`source` builds what the processor threads ask for their next job
  (handing in the one they finished);
- settling: :meth:`ack` a success, :meth:`file` a failure (retry, dead, schedule) and ack
  it in one script;
- the shutdown hand-over: :meth:`hand_over`, one attempt (settlement.py retries it);
- the heartbeat: :meth:`beat` adds this mode's registry writes to the beat's pipeline,
  :meth:`after_beat` reconciles, :meth:`forget` cleans up at exit.

No caller branches on the mode: the launcher picks the strategy (:func:`for_mode`).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from .. import conf
from ..conf import QueueSpec
from ..core import payload, priority, results
from ..store import bell, connection, errors, homes, keys, scripts
from ..store.codec import raw_text, wire
from . import failures
from .jobsource import JobSource
from .kinds import Fetched, Kinds
from .ledger import ACKING, FETCHED, PENDING, PERFORMING, REFUSED, SETTLING, Filing, Ledger, Work
from .requeue import HandedBack, shutdown_advice
from .retired import Retired

log = logging.getLogger("cogworker_django")

# How long a paused-set read stays fresh in basic mode (reliable fetch checks per call).
PAUSED_REFRESH = 2.0
# Basic fetch with queues in several homes blocks on the first home's lists only, this
# long, so a job pushed to another home waits at most about this for a thread.
SPREAD_BLOCK_SECONDS = 0.1

# Raw payloads as text and back (codec.py); kept under these names for callers.
text = raw_text


def weighted_order(queues: tuple[QueueSpec, ...]) -> list[str]:
    """A fresh random order, each queue's chance to come first proportional to its
    weight (weighted sampling without replacement)."""
    if len(queues) == 1:
        return [queues[0].name]
    # Efraimidis-Spirakis: sort by u ** (1 / w), descending.
    return [
        q.name
        for q in sorted(queues, key=lambda q: random.random() ** (1.0 / q.weight), reverse=True)
    ]


def queue_of(raw: str, fallback: str) -> str:
    """The queue a raw payload goes back to. An unparseable payload has no queue of its
    own: it goes to ``fallback`` (the first configured queue), where a processor files
    it in dead with its raw bytes."""
    queue = payload.decode(wire(raw)).get("queue")
    return queue if isinstance(queue, str) and queue else fallback


class FetchStrategy:
    """What both modes share; see the module docstring for the interface."""

    name = ""
    left_behind = ""  # what a hand-over that never went through leaves (for the log)

    def __init__(self, identity: str, queues: tuple[QueueSpec, ...]) -> None:
        self.identity = identity
        self.queues = queues
        self.fallback = queues[0].name

    def settle_keys(self, raw: str) -> tuple[str, str]:
        """The in-progress list a settle script acks ``raw`` from ("" for none), and the
        home whose retry, dead and schedule sets it is filed in."""
        return "", keys.home_of(queue_of(raw, self.fallback))

    def source(self, ledger: Ledger, control: Any, concurrency: int) -> JobSource:
        raise NotImplementedError

    def ack(self, conn: redis.Redis, raw: str, ended: Any = None) -> None:
        """Ack a succeeded (or dropped) job, with its kept outcome (``ended``:
        results.Ended, or None)."""
        raise NotImplementedError

    def file(self, conn: redis.Redis, raw: str, filing: Filing, ended: Any = None) -> None:
        """File a finished job in retry, dead or the schedule and ack it, in one script
        (lua/settle.lua), with its kept outcome and (a filing in dead) its on_dead job.
        Filed even when the job is no longer listed: a Redis that lost its data (a
        restart without persistence) lost the list too, and this filing is then the
        job's only trace."""
        listed, home = self.settle_keys(raw)
        target = {"retry": keys.retry, "dead": keys.dead, "schedule": keys.schedule}
        min_score, keep = conf.dead_trim()
        script_keys = [listed, target[filing.target](home)]
        args: list[Any] = [
            wire(raw),
            repr(filing.score),
            filing.payload,
            filing.target if filing.target == "dead" else "",
            repr(min_score),
            keep,
        ]
        apart = []  # outcomes in another home than the filing: their own round trip
        if ended is not None and homes.Home(home).crosses(homes.Home.root()):
            apart.append(ended)
        elif ended is not None:
            script_keys += ended.keys()
            args += [1, *ended.args()]
        if len(args) == 6:
            args.append(0)
        if filing.on_dead is not None and filing.target == "dead":
            more_keys, more_args = failures.on_dead_placement(filing.on_dead, home)
            script_keys += more_keys
            args += more_args
        scripts.run("settle", conn, script_keys, args)
        if apart:
            errors.best_effort("Results", lambda: results.keep(conn, apart))

    def hand_over(self, conn: redis.Redis, ledger: Ledger) -> None:
        raise NotImplementedError

    def in_progress_lists(self) -> list[str]:
        """The lists this process's jobs are on while they run (none in basic mode)."""
        return []

    def rename(self, conn: redis.Redis, identity: str, ledger: Ledger) -> None:
        """Carry on as ``identity`` (the process was fenced: launcher.py)."""
        old, self.identity = self.identity, identity
        pipe = conn.pipeline(transaction=False)
        self.beat(pipe)
        pipe.hdel(keys.last_beat(), old)
        pipe.execute()

    def beat(self, pipe: Any) -> list[str]:
        """Queue this mode's registry writes on the beat's pipeline; their names."""
        return []

    def after_beat(self, conn: redis.Redis, ledger: Ledger) -> None:
        """After a successful beat (best-effort)."""

    def forget(self, conn: redis.Redis) -> None:
        """At exit, once presence is removed."""


class ReliableFetch(FetchStrategy):
    name = "reliable"
    left_behind = (
        "this process's in-progress jobs stay listed and are recovered after ORPHAN_THRESHOLD"
    )

    def __init__(self, identity: str, queues: tuple[QueueSpec, ...]) -> None:
        super().__init__(identity, queues)
        # One in-progress list per home this process reads (one off a cluster).
        self.groups = homes.group_by_home(q.name for q in queues)
        self.home = self.groups[0][0]
        self.lists: dict[str, str] = {h: h.inprogress(identity) for h, _ in self.groups}
        # Lists outside the prefix's home: recovery finds them by the homes this
        # process records at each beat (P:inprogress_homes:<id>).
        self.apart = any(home.crosses(homes.Home.root()) for home, _ in self.groups)
        self.inprogress = self.lists[self.home]
        # Kept outcomes (the prefix's home) can't ride in the fetch script's home.
        self.home_apart = homes.Home(self.home).crosses(homes.Home.root())
        self._script = scripts.get("fetch")
        # With a home per queue: the home each fetched job came from, so its ack and its
        # filing go to that home's list and sets (the payload's own queue is only the
        # fallback: its bytes may name a queue of another home).
        self._home_of: dict[str, str] = {}
        # Listed but unknown at the last beat: requeued if still so at the next (a fetch
        # in flight is never taken for a lost reply), with the home of their list.
        self._unknown_last_beat: set[tuple[str, str]] = set()  # (list, raw)
        self._out_last_beat: set[int] = set()  # the fetches out at that look
        # The lists of the identity this process had before it was fenced, while jobs
        # are left on them (retired.py; None otherwise). Set and cleared by the
        # heartbeat's thread; every other thread reads it once per use.
        self.retired: Retired | None = None

    def source(self, ledger: Ledger, control: Any, concurrency: int) -> JobSource:
        from .dispatch import Dispatcher

        return Dispatcher(self, ledger, control, concurrency)

    def bells(self) -> list[str]:
        """The doorbells an idle feeder waits on (store/bell.py): those of the queues of
        the first home. A BRPOP's keys must share a slot on a cluster, so with a home per
        queue the other queues' pushes are found at the wait's end
        (FETCH_IDLE_MAX_INTERVAL), as before doorbells."""
        return bell.bells(self.groups[0][1])

    def ring(self) -> None:
        """Ring the bells :meth:`bells` names (the next idle worker's turn: dispatch.py)."""
        bell.ring(connection.get_client(), self.groups[0][1])

    # Taking and settling -----------------------------------------------------------------

    def fetch(self, conn: redis.Redis, ack: Work | None = None) -> Work | None:
        """Ack ``ack`` (if any) and take the next job, in one round trip."""
        works = self.fetch_many(conn, [ack.raw] if ack else [], 1)
        return works[0] if works else None

    def fetch_many(
        self,
        conn: Any,
        acks: list[str],
        count: int,
        ends: Sequence[Any] = (),
        kinds: Kinds | None = None,
    ) -> Fetched:
        """Ack ``acks`` and take up to ``count`` jobs, in one round trip (see
        dispatch.py for how a pool of threads shares it); with ``kinds``, at most
        ``kinds.async_room`` async jobs among them and the rest plain (lua/fetch.lua).
        With a home per queue: the homes in the order of their first queue in this
        call's weighted order, the first asked first (with every ack, each to its home,
        in the same round trip), the next only for what the first could not give, each
        by the room of each kind left (:meth:`Kinds.after`)."""
        retired = self.retired
        if retired is not None and any(raw in retired.on for raw in acks):
            # Acks of jobs on the old identity's lists: to those lists, before the rest
            # (a failure leaves every ack pending, as a failed fetch does).
            old = [raw for raw in acks if raw in retired.on]
            self._lrem_each(conn, [(retired.on[raw], raw) for raw in old])
            retired.settled(old)
            acks = [raw for raw in acks if raw not in retired.on]
        order = weighted_order(self.queues)
        if len(self.groups) == 1 and not (ends and self.home_apart):
            return self._take(conn, self.home, order, acks, count, ends, kinds)
        if ends:
            # The outcomes live in the prefix's home, apart from every queue's: written
            # first, in a round trip of their own (before the acks: a failure leaves both
            # pending), as with a home per queue no one script can hold them.
            results.keep(connection.get_client(), list(ends))
        if len(self.groups) == 1:
            return self._take(conn, self.home, order, acks, count, (), kinds)
        return self._take_across_homes(conn, order, acks, count, kinds)

    def _take_across_homes(
        self, conn: Any, order: list[str], acks: list[str], count: int, kinds: Kinds | None
    ) -> Fetched:
        """:meth:`fetch_many` with a home per queue (its outcomes already kept)."""
        acked: dict[str, list[str]] = {}
        for raw in acks:
            acked.setdefault(self.settle_keys(raw)[1], []).append(raw)
        groups = homes.group_by_home(order)
        first, first_queues = groups[0]
        others = [h for h in acked if h != first]
        if others:
            self._ack_elsewhere(others, acked)
        works = self._take(conn, first, first_queues, acked.get(first, []), count, (), kinds)
        for home, queues in groups[1:]:
            if len(works) >= count:
                break
            left = kinds.after(works) if kinds is not None else None
            more = self._take(conn, home, queues, [], count - len(works), (), left)
            works.extend(more)
            works.blocked = works.blocked or more.blocked
        for raw in acks:
            self._home_of.pop(raw, None)
        for work in works:
            self._home_of[work.raw] = keys.home_of(work.queue)
        return works

    def _take(
        self,
        conn: Any,
        home: str,
        order: list[str],
        acks: list[str],
        count: int,
        ends: Sequence[Any] = (),
        kinds: Kinds | None = None,
    ) -> Fetched:
        """One fetch script on one home: ack ``acks`` (keeping their outcomes ``ends``,
        in the same home), take up to ``count`` jobs from ``order`` (queues of that
        home), by ``kinds`` when given."""
        listed = self.lists[home]
        script_keys = [
            listed,
            keys.paused(home),
            *(keys.queue(q) for q in order),
            *(keys.priority_queue(q) for q in order),  # django.tasks priorities
        ]
        args: list[Any] = [len(acks), *map(wire, acks), len(ends)]
        for end in ends:
            script_keys += end.keys()
            args += end.args()
        if kinds is None:
            args += [count, "", "", "", *order]
        else:
            args += [count, kinds.async_room, kinds.paths, kinds.spare, *order]
        result = self._script(conn, script_keys, args)
        works = Fetched()
        if not result:
            return works
        pairs = len(result) - len(result) % 2
        works.extend(Work(text(result[i]), text(result[i + 1])) for i in range(0, pairs, 2))
        retired = self.retired
        if retired is not None and listed in retired.lists:
            # Sent before the swap of identities: its jobs are on an old list.
            retired.took((w.raw for w in works), listed)
        if pairs < len(result):  # a trailing "blocked:<kind>"
            works.blocked = text(result[-1]).partition(":")[2] or "p"
        return works

    def _ack_elsewhere(self, others: list[str], acked: dict[str, list[str]]) -> None:
        """The acks for homes other than the one fetched from first: one pipeline (a
        round trip per master they are on, sent before the fetch so a failure leaves
        every ack pending, as a failed fetch does)."""
        self._lrem_each(
            connection.get_client(), [(self.lists[h], raw) for h in others for raw in acked[h]]
        )

    @staticmethod
    def _lrem_each(conn: Any, acks: list[tuple[str, str]]) -> None:
        """Ack each ``(list, raw)`` in one pipeline: plain LREMs, as fetch.lua acks (no
        script source sent along: a pipeline can't use EVALSHA safely, it can't reload a
        script a failed-over master lacks)."""
        pipe = conn.pipeline(transaction=False)
        for listed, raw in acks:
            pipe.lrem(listed, 1, wire(raw))
        pipe.execute()

    def settle_keys(self, raw: str) -> tuple[str, str]:
        retired = self.retired
        on_old = retired.where(raw) if retired is not None else None
        if on_old is not None:
            return on_old
        if len(self.lists) == 1:  # every ack to the one list this process has
            return self.inprogress, self.home
        home = self._home_of.get(raw) or keys.home_of(queue_of(raw, self.fallback))
        if home not in self.lists:  # not a home this process reads: its first one
            home = self.home
        return self.lists[home], home

    def ack(self, conn: redis.Redis, raw: str, ended: Any = None) -> None:
        if ended is None:
            # redis-py types LREM's value as str; it sends bytes as they are (the exact payload).
            conn.lrem(self.settle_keys(raw)[0], 1, wire(raw))  # type: ignore[arg-type]
        else:  # with its outcome: the fetch script, asking for no job
            home = self.settle_keys(raw)[1]
            if homes.Home(home).crosses(homes.Home.root()):
                results.keep(conn, [ended])
                conn.lrem(self.settle_keys(raw)[0], 1, wire(raw))  # type: ignore[arg-type]
            elif self.settle_keys(raw)[0] != self.lists[home]:  # on an old list
                results.keep(conn, [ended])
                conn.lrem(self.settle_keys(raw)[0], 1, wire(raw))  # type: ignore[arg-type]
            else:
                self._take(conn, home, [], [raw], 0, [ended])
        self._settled(raw)

    def file(self, conn: redis.Redis, raw: str, filing: Filing, ended: Any = None) -> None:
        super().file(conn, raw, filing, ended)
        self._settled(raw)

    def _settled(self, raw: str) -> None:
        self._home_of.pop(raw, None)
        retired = self.retired
        if retired is not None:
            retired.settled([raw])

    # Shutdown ----------------------------------------------------------------------------

    def hand_over(self, conn: redis.Redis, ledger: Ledger) -> None:
        """Settle this process's list in one atomic script (lua/handover.lua): pending
        acks dropped, finished-but-unfiled jobs to ``P:unsettled``, everything else on
        the list (unfinished jobs, a lost fetch reply) back on its queue. Raises if it
        could not run (nothing changed then)."""
        lists = self._lists_of(self.retired)
        by_list: dict[str, list[Work]] = {name: [] for name in lists}
        for work in ledger.works(PENDING, ACKING):  # (ACKING: an ack whose fetch never came back)
            by_list.setdefault(self.settle_keys(work.raw)[0], []).append(work)
        firsts: dict[str, str] = {home: queues[0] for home, queues in self.groups}
        for name, (_identity, home) in lists.items():
            self._hand_over_list(conn, ledger, name, home, firsts[home], by_list[name])
            ledger.handed_over(by_list[name])

    def _hand_over_list(
        self,
        conn: redis.Redis,
        ledger: Ledger,
        listed: str,
        home: str,
        fallback: str,
        pending: list[Work],
    ) -> None:
        """One list, in one script (a list once settled has nothing left to settle, so a
        retry after another failed repeats nothing)."""
        requeue = self._left_on_list(conn, listed, pending)
        if not (requeue or pending):
            return
        running = {w.raw for w in ledger.works(PERFORMING, SETTLING, REFUSED)}
        targets, moves, interrupted = _requeue_moves(requeue, running, home, fallback)
        acks = [wire(w.raw) for w in pending if w.filing is None]
        filings = [(wire(w.raw), w.filing.unsettled_entry()) for w in pending if w.filing]
        args: list[Any] = [len(acks), *acks, len(filings), *(x for f in filings for x in f)]
        args += moves
        _acked, handed, requeued, moved = scripts.run(
            "handover", conn, [listed, keys.unsettled(home), *targets], args
        )
        done = [back for index, back in interrupted if moved[index]]
        for back in done:
            back.filed()
        _tell_handed_over(requeued, handed, done, home)

    def _left_on_list(self, conn: redis.Redis, name: str, pending: list[Work]) -> list[str]:
        """The jobs of the list ``name`` to requeue: every copy on it, except one per
        pending settlement (two identical payloads are two jobs)."""
        listed = Counter(text(r) for r in conn.lrange(name, 0, -1))
        for work in pending:
            listed[work.raw] = max(0, listed[work.raw] - 1)
        return list(listed.elements())

    # The heartbeat -----------------------------------------------------------------------

    def beat(self, pipe: Any) -> list[str]:
        names = self._register(pipe, self.identity, list(self.lists), "")
        retired = self.retired
        if retired is not None:  # its lists are this process's too, until empty
            for older in retired.identities:
                names += self._register(pipe, older, retired.homes_of(older), "retired identity's ")
        return names

    def _register(self, pipe: Any, identity: str, its_homes: list[str], which: str) -> list[str]:
        """Queue the writes that let recovery find ``identity``'s lists; their names."""
        pipe.sadd(keys.inprogress_ids(), identity)
        scripts.get("beat_stamp").pipelined(pipe, [keys.last_beat()], [identity])
        names = [f"{which}in-progress registry", f"{which}last-beat stamp"]
        if self.apart:
            pipe.sadd(keys.inprogress_homes(identity), *its_homes)
            names.append(f"{which}in-progress homes")
        return names

    def _lists_of(self, retired: Retired | None) -> dict[str, tuple[str, str]]:
        """Every in-progress list of this process: name -> (identity, home), the old
        identity's too while it is ``retired``."""
        lists = {name: (self.identity, home) for home, name in self.lists.items()}
        if retired is not None:
            lists.update(retired.lists)
        return lists

    def in_progress_lists(self) -> list[str]:
        return list(self._lists_of(self.retired))

    def rename(self, conn: redis.Redis, identity: str, ledger: Ledger) -> None:
        """Carry on as ``identity`` (this process was fenced: retired.py). Its lists are
        registered before any fetch can use them; the jobs on the old lists are known
        before the names swap, so no ack of theirs goes to a new list."""
        old = self.identity
        new_lists = {h: homes.Home(h).inprogress(identity) for h in self.lists}
        # (Fenced again while jobs are left on an older identity's lists: those too.)
        retired = Retired(self._lists_of(self.retired), frozenset())
        pipe = conn.pipeline(transaction=False)
        self._register(pipe, identity, list(new_lists), "")
        for older in retired.identities:  # (recovery forgot them: listed again)
            self._register(pipe, older, retired.homes_of(older), "")
        pipe.execute()
        self.retired = retired  # from here a fetch that lands on an old list says so
        try:
            for name in retired.lists:
                retired.took((text(r) for r in conn.lrange(name, 0, -1)), name)
        except Exception:
            self.retired = None  # nothing swapped: the process keeps its identity
            raise
        self.identity, self.lists = identity, new_lists
        self.inprogress = new_lists[self.home]
        # Read after the swap: a fetch given an old list's name was counted out before it
        # was given it, so it is either out now or back, its jobs noted.
        retired.out = ledger.snapshot().fetches_out
        log.info(
            "%d job(s) taken as %s stay on that identity's lists until settled",
            len(retired.on),
            old,
        )

    def _retire(self, conn: redis.Redis, retired: Retired) -> None:
        """The old identity's lists are empty for good: forget it, as recovery forgets a
        dead process (its presence written by the heartbeat goes too)."""
        gone = retired.identities
        pipe = conn.pipeline(transaction=False)
        pipe.srem(keys.inprogress_ids(), *gone)
        pipe.hdel(keys.last_beat(), *gone)
        pipe.delete(*map(keys.process, gone), *retired.lists)
        if self.apart:
            pipe.delete(*map(keys.inprogress_homes, gone))
        pipe.execute()
        self.retired = None
        log.info("every job taken as %s is settled: forgotten", " and ".join(gone))

    def after_beat(self, conn: redis.Redis, ledger: Ledger) -> None:
        """Requeue jobs on this process's list that it does not know it has (a fetch whose
        reply was lost): only those seen unknown on two beats in a row, and only once
        every fetch that was out at the first of them has come back, so a fetch in
        flight is never taken for one (its reply held up past a beat: a stalled proxy,
        a thread starved of the interpreter lock) and its jobs never run twice."""
        retired = self.retired
        lists = self._lists_of(retired)
        listed = {(name, text(r)) for name in lists for r in conn.lrange(name, 0, -1)}
        # Read after the list: a fetch that wrote a listed job is out now, or its jobs are
        # in the ledger (they enter it in the step the fetch leaves it: one snapshot).
        snapshot = ledger.snapshot()
        known, out = snapshot.known, set(snapshot.fetches_out)
        unknown = {(name, raw) for name, raw in listed if raw not in known}
        if self._out_last_beat & out:
            confirmed: set[tuple[str, str]] = set()  # one may yet bring them: next beat
        else:
            confirmed = unknown & self._unknown_last_beat
        self._unknown_last_beat, self._out_last_beat = unknown - confirmed, out
        n = self._requeue(conn, confirmed, lists)
        if n:
            log.warning(
                "requeued %d job(s) this process had taken without knowing it (a lost fetch reply)",
                n,
            )
        if retired is not None and retired.over(conn, snapshot.fetches_out):
            self._retire(conn, retired)

    def give_back(self, conn: redis.Redis, raws: list[str]) -> int:
        """Put jobs fetched but not started (the process went quiet meanwhile) back on
        their queues, not counted as orphaned; returns how many were moved."""
        lists = self._lists_of(self.retired)
        given = self._requeue(conn, [(self.settle_keys(raw)[0], raw) for raw in raws], lists)
        for raw in raws:
            self._settled(raw)
        return given

    def _requeue(
        self,
        conn: redis.Redis,
        listed: Iterable[tuple[str, str]],
        lists: dict[str, tuple[str, str]],
    ) -> int:
        """Move ``(list, raw)`` jobs of this process's ``lists`` (:meth:`_lists_of`) back
        to their queues; how many were moved (a job no longer listed is not)."""
        from .requeue import requeue_from_list

        by_list: dict[str, list[str]] = {}
        for name, raw in listed:
            if name in lists:
                by_list.setdefault(name, []).append(raw)
        firsts: dict[str, str] = {home: queues[0] for home, queues in self.groups}
        n = 0
        for name, raws in by_list.items():
            identity, home = lists[name]
            n += requeue_from_list(
                conn,
                identity,
                raws,
                home=home,
                count_orphaning=False,
                fallback_queue=firsts[home],
            )
        return n

    def forget(self, conn: redis.Redis) -> None:
        retired = self.retired
        if retired is not None and retired.over(conn, frozenset()):
            self._retire(conn, retired)
        if all(conn.llen(name) == 0 for name in self.lists.values()):
            # Nothing left for recovery to find: forget this identity.
            pipe = conn.pipeline(transaction=False)
            pipe.srem(keys.inprogress_ids(), self.identity)
            pipe.hdel(keys.last_beat(), self.identity)
            for name in self.lists.values():
                pipe.delete(name)
            if self.apart:
                pipe.delete(keys.inprogress_homes(self.identity))
            pipe.execute(raise_on_error=False)


class BasicFetch(FetchStrategy):
    name = "basic"
    left_behind = "with basic fetch, the unfinished jobs not requeued are lost"

    def __init__(self, identity: str, queues: tuple[QueueSpec, ...]) -> None:
        super().__init__(identity, queues)
        self._paused: set[str] = set()
        self._paused_at = 0.0
        self._take = scripts.get("basic_fetch")
        # Jobs the hand-over pushed already, across its retries (each pushed once).
        self._handed: set[int] = set()

    def source(self, ledger: Ledger, control: Any, concurrency: int) -> JobSource:
        return BasicSource(self, ledger)

    def beat(self, pipe: Any) -> list[str]:
        # The last-beat stamp, as reliable fetch writes it: a process that claimed
        # periodic slots is judged dead by its missed beats (rule 13), not by its
        # presence key's TTL alone (orphan recovery pushes its claims then).
        scripts.get("beat_stamp").pipelined(pipe, [keys.last_beat()], [self.identity])
        return ["last-beat stamp"]

    def forget(self, conn: redis.Redis) -> None:
        conn.hdel(keys.last_beat(), self.identity)

    def _active(self, conn: redis.Redis) -> list[str]:
        now = time.monotonic()
        if now - self._paused_at > PAUSED_REFRESH:
            paused: set[str] = set()
            for home, _queues in homes.group_by_home(q.name for q in self.queues):
                try:
                    paused |= {text(m) for m in conn.smembers(keys.paused(home))}
                except redis.ResponseError:
                    pass  # a paused set of the wrong type pauses nothing
            self._paused, self._paused_at = paused, now
        return [q for q in weighted_order(self.queues) if q not in self._paused]

    def fetch(
        self, conn: redis.Redis, ack: Work | None = None, ends: Sequence[Any] = ()
    ) -> Work | None:
        """The next job (None when every queue stayed empty); ``ends``: outcomes to keep,
        written by the first script (or in a round trip of their own first, when they
        live in another home than the first queue's, or every queue is paused)."""
        active = self._active(conn)
        groups = homes.group_by_home(active) if active else []
        if ends and (not groups or homes.Home(groups[0][0]).crosses(homes.Home.root())):
            results.keep(conn, list(ends))
            ends = ()
        if not active:
            time.sleep(connection.FETCH_BLOCK_SECONDS)
            return None
        # django.tasks priorities wait in zsets BRPOP can't see (priority.py): one
        # non-blocking script per home takes the next job in priority order from the
        # zsets and lists; BRPOP only waits when none found one, and only on the first
        # home's lists (a blocking command must stay in one slot).
        for _home, queues in groups:
            script_keys = [*map(keys.queue, queues), *map(keys.priority_queue, queues)]
            args: list[Any] = [len(ends)]
            for end in ends:
                script_keys += end.keys()
                args += end.args()
            found = self._take(conn, script_keys, [*args, *queues])
            ends = ()
            if found:
                return Work(text(found[0]), text(found[1]))
        by_key = {keys.queue(q): q for q in groups[0][1]}
        wait = connection.FETCH_BLOCK_SECONDS if len(groups) == 1 else SPREAD_BLOCK_SECONDS
        result = conn.brpop(list(by_key), timeout=wait)
        if not result:
            return None
        return Work(by_key[text(result[0])], text(result[1]))

    def ack(self, conn: redis.Redis, raw: str, ended: Any = None) -> None:
        """Nothing to ack (BRPOP already removed the job from Redis): only its outcome to
        keep, in a round trip of its own (basic fetch has no ack to ride with)."""
        if ended is not None:
            results.keep(conn, [ended])

    def hand_over(self, conn: redis.Redis, ledger: Ledger) -> None:
        """No in-progress list: requeue from the ledger (every job started and not
        settled, and any fetched and not started). Each job is pushed once (across
        retries); raises if any could not be pushed, so the caller retries the rest."""
        moved = 0
        done: list[HandedBack] = []
        failure: Exception | None = None
        items: list[tuple[int, str, bytes]] = []
        interrupted: dict[int, HandedBack] = {}
        for work in ledger.works(PERFORMING, SETTLING, REFUSED):
            # Interrupted mid-run: back counted, or to dead (requeue.HandedBack). (An
            # abandoned run is the watchdog's: filed, or pending with its filing.)
            back = HandedBack(work.raw, work.queue, keys.home_of(work.queue))
            interrupted[id(work)] = back
            items.append((id(work), back.target, back.payload.encode()))
        for work in ledger.works(FETCHED):  # fetched, never started: back as they are
            items.append((id(work), priority.return_key(work.queue), wire(work.raw)))
        unsettled = set()
        for work in ledger.works(PENDING):
            if work.filing is not None:
                entry = work.filing.unsettled_entry().encode()
                key = keys.unsettled(self.settle_keys(work.raw)[1])
                unsettled.add(key)
                items.append((id(work), key, entry))
        for ident, key, value in items:
            if ident in self._handed:
                continue
            counted = interrupted.get(ident)
            try:
                if counted is not None and counted.score:
                    conn.zadd(key, {value: float(counted.score)})
                else:
                    conn.rpush(key, value)
            except Exception as exc:  # noqa: BLE001 - one failure must not cost the others
                failure = exc
                continue
            self._handed.add(ident)
            if counted is not None:
                counted.filed()
                done.append(counted)
            if key not in unsettled:
                moved += 1
        if moved:
            log.warning("requeued %d job(s) unfinished at shutdown%s", moved, shutdown_advice(done))
        if failure is not None:
            raise failure


class BasicSource:
    """Basic fetch's job source: each thread fetches for itself (BRPOP), and a finished
    job needs no ack (BRPOP removed it from Redis): only the outcomes the runs keep,
    written with the next fetch (or by the heartbeat when it fails)."""

    def __init__(self, strategy: BasicFetch, ledger: Ledger) -> None:
        self.strategy = strategy
        self.ledger = ledger

    def next(self, conn: redis.Redis) -> Work | None:
        """The next job (None when every queue stayed empty); raises while Redis is away
        (the processor reports it and backs off)."""
        done = self.ledger.take_acks()
        try:
            work = self.strategy.fetch(conn, ends=[w.ended for w in done if w.ended is not None])
        except BaseException:
            self.ledger.acks_failed(done)  # the heartbeat writes their outcomes
            raise
        self.ledger.acks_sent(done)
        errors.recovered("Fetch")
        return work

    def give_back(self, work: Work) -> bool:
        """A job fetched as the process stops: it exists only here, so it runs."""
        return False

    def start(self) -> None:
        """Nothing to start: each processor thread fetches for itself."""

    def wake_waiting(self) -> None:
        """No thread waits here: each is in its own BRPOP (at most FETCH_BLOCK_SECONDS)."""

    def join(self, timeout: float) -> bool:
        """No fetching of its own to wait for (the processor threads' are waited for)."""
        return False

    def flush(self, conn: redis.Redis) -> None:
        """The outcomes of the last runs, at shutdown (best-effort, rule 4)."""
        done = self.ledger.take_acks()
        ends = [w.ended for w in done if w.ended is not None]
        if ends:
            errors.best_effort("Results", lambda: results.keep(conn, ends))
        self.ledger.acks_sent(done)


def _tell_handed_over(requeued: int, handed: int, done: list[HandedBack], home: str) -> None:
    if requeued:
        log.warning("requeued %d job(s) unfinished at shutdown%s", requeued, shutdown_advice(done))
    if handed:
        log.warning(
            "handed %d finished job(s) that could not be filed to %s", handed, keys.unsettled(home)
        )


def _requeue_moves(
    requeue: list[str], running: set[str], home: str, fallback: str
) -> tuple[list[str], list[Any], list[tuple[int, HandedBack]]]:
    """The hand-over's moves of the jobs ``requeue``: a job that was running is
    interrupted, and goes back counted (requeue.HandedBack: to dead past MAX_ORPHANINGS);
    one fetched and not started goes back as it is. (targets, ARGV triples, and the
    counted ones by their place.)"""
    targets: list[str] = []
    moves: list[Any] = []
    interrupted: list[tuple[int, HandedBack]] = []
    for r in requeue:
        queue = homes.home_queue(queue_of(r, fallback), home, fallback)
        if r in running:
            back = HandedBack(r, queue, home)
            interrupted.append((len(targets), back))
            targets.append(back.target)
            moves += [wire(r), back.payload, back.score]
        else:
            targets.append(priority.return_key(queue))
            moves += [wire(r), wire(r), ""]
    return targets, moves, interrupted


def for_mode(mode: str, identity: str, queues: tuple[QueueSpec, ...]) -> FetchStrategy:
    return (ReliableFetch if mode == "reliable" else BasicFetch)(identity, queues)


__all__ = ["BasicFetch", "FetchStrategy", "ReliableFetch", "Work", "for_mode", "text", "wire"]
