"""Which homes exist: the sets of keys that share a hash slot (keys.py).

Off a cluster, and on a cluster with a PREFIX that holds its own tag, there is one home,
:func:`keys.root`, and nothing here reads Redis. Callers outside the seam never ask which
case this is: they walk :func:`all_homes` and ask a :class:`Home` whether a write there
crosses to another slot (:meth:`Home.crosses`, :meth:`Home.lists_apart`); with one home
the answer is always no. With a tag per queue (:func:`keys.spread`)
each queue's schedule, retry, dead and unsettled sets and in-progress lists live in
that queue's home, so the chores that walk them (the poller, orphan recovery, the key
guard, the admin's listings) need every home a job may be in: the homes of every queue
anyone has pushed to (``P:queues``), read recently (``P:live_queues``) or is configured
to read. A queue listed nowhere has no jobs of its own to find: every push lists its
queue, every worker lists the queues it reads at each beat, and a worker's poller
always walks the homes of its own queues.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import conf
from . import errors, keys
from .codec import raw_text


class Home(str):
    """One home: the key root its keys start with (``P``, or ``{P|queue}`` with a home
    per queue), and the questions a caller asks of it instead of asking whether this is
    a cluster. A ``str``, so it goes wherever a home's name went."""

    __slots__ = ()

    @classmethod
    def root(cls) -> Home:
        """The prefix's own home: the registries, the outbox, batches, claims."""
        return cls(keys.root())

    @classmethod
    def of_queue(cls, queue: str) -> Home:
        return cls(keys.home_of(queue))

    @classmethod
    def of_job(cls, job: Any) -> Home:
        """The home of a job's own keys (its unique lock, the sets it is filed in): its
        queue's, or the prefix's for a payload that names no queue."""
        queue = job.get("queue") if isinstance(job, dict) else None
        return cls.of_queue(queue) if isinstance(queue, str) and queue else cls.root()

    def schedule(self) -> str:
        return keys.schedule(self)

    def retry(self) -> str:
        return keys.retry(self)

    def dead(self) -> str:
        return keys.dead(self)

    def unsettled(self) -> str:
        return keys.unsettled(self)

    def paused(self) -> str:
        return keys.paused(self)

    def inprogress(self, identity: str) -> str:
        return keys.inprogress(identity, self)

    def key_types(self) -> dict[str, str]:
        """Key -> Redis TYPE of this home's fixed keys (the key guard's list)."""
        return keys.home_types(self)

    def crosses(self, other: str) -> bool:
        """Whether a write here and one in ``other`` are in two hash slots: no one script
        can do both (a cluster refuses it), so the caller splits it or goes through the
        outbox (outbox.py)."""
        return str(self) != str(other)

    def lists_apart(self) -> bool:
        """Whether ``P:queues`` (the queue listing, in the prefix's home) is in another
        slot than this home: a script writing here cannot list a queue, its caller lists
        it in a write of its own."""
        return self.crosses(keys.root())

    def listing_keys(self) -> list[str]:
        """``P:queues`` as a KEYS entry of a script that writes here, when it is in this
        home's slot; none when this home lists apart."""
        return [] if self.lists_apart() else [keys.queues()]


def group_by_home(queues: Iterable[str]) -> list[tuple[Home, list[str]]]:
    """``(home, queues)`` pairs, homes in the order their first queue comes, queues in
    the order given (a fetch keeps its weighted order within and across homes)."""
    groups: dict[Home, list[str]] = {}
    for q in queues:
        groups.setdefault(Home.of_queue(q), []).append(q)
    return list(groups.items())


def known_queues(conn: Any, also: Iterable[str] = ()) -> list[str]:
    """Every queue a job may be in: listed, read lately, configured, and ``also``. A
    registry of the wrong type lists nothing (the key guard moves it aside)."""
    names = dict.fromkeys([*also, *conf.get().queue_names])
    pipe = conn.pipeline(transaction=False)
    pipe.smembers(keys.queues())
    pipe.zrange(keys.live_queues(), 0, -1)
    for found in pipe.execute(raise_on_error=False):
        if isinstance(found, Exception):
            if errors.is_unavailable(found):
                raise found
            continue
        names.update(dict.fromkeys(sorted(raw_text(m) for m in found)))
    return list(names)


def all_homes(conn: Any, also: Iterable[str] = ()) -> list[Home]:
    """Every home a job may be in (one, and no Redis read, without a tag per queue): each
    known queue's and, last, the prefix's own (where a job naming no queue is filed, and
    what the outbox could not read is buried: outbox.py)."""
    if not keys.spread():
        return [Home.root()]
    found = dict.fromkeys(Home.of_queue(q) for q in known_queues(conn, also))
    return list({**found, Home.root(): None})


def process_homes(conn: Any, identity: str, also: Iterable[str] = ()) -> list[Home]:
    """Every home where ``identity`` may have an in-progress list: those it recorded
    (``P:inprogress_homes:<id>``) and every known home."""
    if not keys.spread():
        return [Home.root()]
    recorded: list[Home] = []
    try:
        found = conn.smembers(keys.inprogress_homes(identity))
        recorded = sorted(Home(raw_text(h)) for h in found)
    except Exception as exc:
        if errors.is_unavailable(exc):
            raise
    return list(dict.fromkeys([*recorded, *_queue_homes(conn, also)]))


def _queue_homes(conn: Any, also: Iterable[str] = ()) -> list[Home]:
    """The homes of every known queue: where in-progress lists can be (a fetch reads
    only queues; the prefix's own home holds none)."""
    return [h for h in all_homes(conn, also) if h != keys.root()]


def inprogress_keys(conn: Any, identities: Iterable[str]) -> dict[str, list[str]]:
    """Each identity's in-progress lists, one per home it may have one in (one list,
    and no Redis read, without a tag per queue)."""
    idents = list(identities)
    if not keys.spread():
        return {i: [keys.inprogress(i, keys.root())] for i in idents}
    every = _queue_homes(conn)
    pipe = conn.pipeline(transaction=False)
    for ident in idents:
        pipe.smembers(keys.inprogress_homes(ident))
    out = {}
    for ident, recorded in zip(idents, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(recorded, Exception) and errors.is_unavailable(recorded):
            raise recorded
        mine = sorted(raw_text(h) for h in recorded) if isinstance(recorded, set) else []
        out[ident] = [keys.inprogress(ident, h) for h in dict.fromkeys([*mine, *every])]
    return out


def a_queue_of(home: str, fallback: str) -> str:
    """A queue of ``home``: ``fallback`` if it is one, else the queue the home's tag
    names (``{P|q}`` is queue ``q``'s home)."""
    if keys.home_of(fallback) == home:
        return fallback
    return keys.queue_of_home(home) or fallback


def job_home(job: Any) -> Home:
    """The home of a job's own keys (its unique lock, the sets it is filed in): its
    queue's, or the prefix's for a payload that names no queue."""
    return Home.of_job(job)


def home_queue(queue: Any, home: str, fallback: str) -> str:
    """``queue`` if it is a queue name of ``home``, else ``fallback`` (a queue of that
    home): a job moved within a home by one script must stay in that home's slot."""
    if isinstance(queue, str) and queue and keys.home_of(queue) == home:
        return queue
    return fallback


__all__ = [
    "Home",
    "a_queue_of",
    "all_homes",
    "group_by_home",
    "home_queue",
    "inprogress_keys",
    "job_home",
    "known_queues",
    "process_homes",
]
