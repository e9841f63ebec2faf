"""``Queue``: one pending list (``P:queue:<name>``), LPUSHed and taken from the right.

Size, latency (now minus ``enqueued_at`` of the oldest job, the one at index -1),
paused flag, pause/resume, clear, and a paginated view in run order. The known queues
are ``P:queues`` (written by pushes and heartbeats) plus the paused ones. A queue's
paused flag is in its home's paused set (keys.py: one per queue on a Redis Cluster).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from .. import conf
from ..core import departures, locks, payload
from ..store import homes, keys, listing
from ._util import as_bytes, client, epoch, text
from .jobs import Outcome
from .records import JobRecord

# Jobs removed (and their locks released) per round trip when a queue is cleared.
CLEAR_BATCH = 500
# LRANGE batch and cap for a find by jid in a queue.
FIND_BATCH = 1000
FIND_LIMIT = 200_000


@dataclass(frozen=True)
class QueueInfo:
    name: str
    size: int
    latency: float | None  # seconds the oldest job has waited; None when empty or undecodable
    paused: bool
    # A queue key holding another type (until the key guard moves it aside): key -> type.
    wrong_type: dict[str, str] | None = None
    # A live worker read it lately (P:live_queues, within read_window()); False: no
    # worker reads it, so its jobs wait (a mistyped queue name, say).
    read: bool = True


def read_window() -> float:
    """How recently a worker must have listed a queue in ``P:live_queues`` for the queue to
    count as read: the life of a worker's presence (a few beats; worker/heartbeat.py)."""
    return max(2.0, 4 * conf.get().HEARTBEAT_INTERVAL)


def _latency(oldest: bytes | None, now: float) -> float | None:
    if oldest is None:
        return None
    job = payload.decode(oldest)
    if job.get("func") == payload.UNPARSEABLE:
        return None  # the wrapper's timestamps are of this read, not of the push
    enqueued = epoch(job.get("enqueued_at"))
    return max(0.0, now - enqueued) if enqueued is not None else None


class Queue:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<Queue {self.name!r}>"

    @property
    def key(self) -> str:
        return keys.queue(self.name)

    @property
    def paused_key(self) -> str:
        return keys.paused(keys.home_of(self.name))

    # Listing ----------------------------------------------------------------------------

    @staticmethod
    def names() -> list[str]:
        conn = client()
        every = homes.all_homes(conn)
        pipe = conn.pipeline(transaction=False)
        pipe.smembers(keys.queues())
        for home in every:
            pipe.smembers(keys.paused(home))
        known, *paused = pipe.execute()
        return sorted({text(n) for n in known}.union(*({text(n) for n in p} for p in paused)))

    @classmethod
    def all(cls) -> list[Queue]:
        return [cls(n) for n in cls.names()]

    @classmethod
    def overview(cls, *, left_behind: bool = True) -> list[QueueInfo]:
        """Size, latency, paused flag and whether a worker reads it, of every known
        queue, in two round trips. ``left_behind=False`` leaves out a queue that is
        empty, unread, not paused and not in ``COGWORKER["QUEUES"]`` (left behind by a
        worker's ``-q`` run: the admin's list)."""
        names = cls.names()
        if not names:
            return []
        conn = client()
        out, broken = _overview_rows(conn, names)
        if broken:
            _name_wrong_types(conn, out, broken)
        if left_behind:
            return out
        configured = set(conf.get().queue_names)
        return [
            q for q in out if q.read or q.size or q.paused or q.wrong_type or q.name in configured
        ]

    # Reads ------------------------------------------------------------------------------

    def size(self) -> int:
        """Jobs waiting: the list plus the queue's prioritised django.tasks."""
        pipe = client().pipeline(transaction=False)
        pipe.llen(self.key)
        pipe.zcard(keys.priority_queue(self.name))
        return sum(int(n) for n in pipe.execute())

    def latency(self) -> float | None:
        return _latency(client().lindex(self.key, -1), time.time())

    def paused(self) -> bool:
        return bool(client().sismember(self.paused_key, self.name))

    def info(self) -> QueueInfo:
        conn = client()
        pipe = conn.pipeline(transaction=False)
        pipe.llen(self.key)
        pipe.lindex(self.key, -1)
        pipe.sismember(self.paused_key, self.name)
        pipe.zcard(keys.priority_queue(self.name))
        size, oldest, paused, prioritised = pipe.execute()
        return QueueInfo(
            self.name, int(size) + int(prioritised), _latency(oldest, time.time()), bool(paused)
        )

    def jobs(self, start: int = 0, count: int = 25) -> list[JobRecord]:
        """Jobs in the order they will run: ``start`` 0 is the next one (index -1)."""
        start = max(int(start), 0)
        count = max(int(count), 1)
        rows = client().lrange(self.key, -(start + count), -(start + 1))
        return [JobRecord.from_raw(raw, None, "queue", self.name) for raw in reversed(rows)]

    def find(self, jid: str, limit: int = FIND_LIMIT, key: str | None = None) -> JobRecord | None:
        """The job with this jid among the first ``limit`` to run (None beyond that); with
        ``key``, the copy with that :attr:`JobRecord.key`."""
        needle = f'"jid":"{jid}"'.encode()
        conn = client()
        for start in range(0, limit, FIND_BATCH):
            rows = conn.lrange(self.key, -(start + FIND_BATCH), -(start + 1))
            for raw in reversed(rows):
                if needle in as_bytes(raw):
                    record = JobRecord.from_raw(raw, None, "queue", self.name)
                    if record.jid == jid and (key is None or record.key == key):
                        return record
            if len(rows) < FIND_BATCH:
                return None
        return None

    def get(self, key: str, jid: str, limit: int = FIND_LIMIT) -> JobRecord | None:
        """The queued job with this :attr:`JobRecord.key` and jid (the key tells two
        copies of one jid apart), among the first ``limit`` to run; None if it has gone."""
        record = self.find(jid, limit, key=key)
        return record if record is not None and record.key == key else None

    # Actions ----------------------------------------------------------------------------

    def delete(self, record: JobRecord) -> Outcome:
        """Remove this one job from the queue (LREM of its exact bytes, once); it leaves the
        system, so its locks are released. GONE when a worker (or someone) took it first."""
        locks.retry_deferred()
        if not client().lrem(self.key, 1, record.raw):
            return Outcome.GONE
        departures.job_left(record.job, f"deleted from queue {self.name} by an operator")
        return Outcome.DONE

    def pause(self) -> None:
        """Workers stop fetching from this queue (within one fetch) until resumed."""
        conn = client()
        conn.sadd(self.paused_key, self.name)
        if homes.Home.of_queue(self.name).lists_apart():  # so names() finds its paused set
            listing.add(conn, self.name)

    def resume(self) -> None:
        client().srem(self.paused_key, self.name)

    def clear(self, batch: int = CLEAR_BATCH) -> int:
        """Remove the jobs queued when the call starts; returns how many. Taken from the
        right (as workers take them) ``batch`` at a time, each batch's locks released, so
        a job pushed meanwhile stays and a huge queue is never read at once."""
        locks.retry_deferred()
        conn = client()
        remaining = int(conn.llen(self.key))
        removed = 0
        while remaining > 0:
            n = min(batch, remaining)
            # The n jobs at the right end, read and trimmed in one MULTI (RPOP with a
            # count needs Redis 6.2; basic fetch still runs on older servers).
            pipe = conn.pipeline(transaction=True)
            pipe.lrange(self.key, -n, -1)
            pipe.ltrim(self.key, 0, -(n + 1))
            rows, _ = pipe.execute()
            if not rows:
                break
            removed += len(rows)
            remaining -= len(rows)
            for raw in rows:
                departures.job_left(
                    payload.decode(raw), f"queue {self.name} cleared by an operator"
                )
        # Prioritised django.tasks of this queue hold no locks: dropped in one step.
        pipe = conn.pipeline(transaction=True)
        pipe.zcard(keys.priority_queue(self.name))
        pipe.delete(keys.priority_queue(self.name))
        removed += int(pipe.execute()[0])
        if not conn.exists(self.key) and not conn.sismember(self.paused_key, self.name):
            # Empty and not paused: drop it from the listing (a worker reading it, or the
            # next push, lists it again) unless its home still holds jobs of its own.
            if not self._home_holds_jobs(conn):
                listing.remove(conn, self.name)
        return removed

    def _home_holds_jobs(self, conn: Any) -> bool:
        """With a home per queue the listing is how the admin and the poller find the
        queue's schedule, retry and dead sets: a queue whose sets hold jobs stays listed."""
        if not homes.Home.of_queue(self.name).lists_apart():
            return False
        pipe = conn.pipeline(transaction=False)
        for key, kind in keys.home_types(keys.home_of(self.name)).items():
            if kind == "zset":
                pipe.zcard(key)
            elif kind == "list":
                pipe.llen(key)
        return any(isinstance(n, int) and n > 0 for n in pipe.execute(raise_on_error=False))


def _overview_rows(conn: Any, names: list[str]) -> tuple[list[QueueInfo], list[tuple[int, str]]]:
    """Every queue's row of :meth:`Queue.overview`, read in one round trip, and the keys
    Redis refused (index in the rows, key): of the wrong type."""
    pipe = conn.pipeline(transaction=False)
    pipe.zrangebyscore(keys.live_queues(), time.time() - read_window(), "+inf")
    for n in names:
        pipe.llen(keys.queue(n))
        pipe.lindex(keys.queue(n), -1)
        pipe.zcard(keys.priority_queue(n))  # django.tasks with a priority wait here
    groups = homes.group_by_home(names)
    for home, _ in groups:
        pipe.smembers(keys.paused(home))
    live, *replies = pipe.execute(raise_on_error=False)
    read = {text(q) for q in live} if isinstance(live, list) else None  # None: unknown
    paused_names: set[str] = set()
    for members in replies[len(replies) - len(groups) :]:
        paused_names |= {text(p) for p in members} if isinstance(members, set) else set()
    now = time.time()
    out = []
    broken: list[tuple[int, str]] = []
    for i, n in enumerate(names):
        size, oldest, prioritised = replies[3 * i : 3 * i + 3]
        if isinstance(size, Exception):
            broken.append((i, keys.queue(n)))
        if isinstance(prioritised, Exception):
            broken.append((i, keys.priority_queue(n)))
        waiting = (size if isinstance(size, int) else 0) + (
            prioritised if isinstance(prioritised, int) else 0
        )
        head = oldest if isinstance(oldest, bytes) else None
        out.append(
            QueueInfo(
                n, waiting, _latency(head, now), n in paused_names, read=read is None or n in read
            )
        )
    return out, broken


def _name_wrong_types(conn: Any, out: list[QueueInfo], broken: list[tuple[int, str]]) -> None:
    """Keys of the wrong type (the key guard moves them aside soon): say which, in the
    rows of ``out`` they belong to (one more round trip, only when there are some)."""
    pipe = conn.pipeline(transaction=False)
    for _, key in broken:
        pipe.type(key)
    found: dict[int, dict[str, str]] = {}
    for (i, key), kind in zip(broken, pipe.execute(raise_on_error=False), strict=True):
        found.setdefault(i, {})[key] = text(kind) if not isinstance(kind, Exception) else "?"
    for i, wrong in found.items():
        out[i] = replace(out[i], wrong_type=wrong)
