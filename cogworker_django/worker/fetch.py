"""The two fetch modes: how a processor thread takes its next job.

``ReliableFetch`` (default) moves a job atomically into this process's in-progress list,
so a process that dies mid-job leaves it there for orphan recovery; acking the finished
job and fetching the next are one round trip. ``BasicFetch`` is one blocking BRPOP: a
job taken by a process that dies is lost (Redis < 6.2, or ``FETCH="basic"``).

The mode is chosen by configuration (:func:`for_mode`). Both classes have ``fetch``,
``ack`` and ``settle_key``, but they are not interchangeable behind those: what else
differs by mode (the dispatcher that shares reliable fetch among threads, the shutdown
hand-over, the heartbeat's in-progress registry and reconcile) checks which class is in
use.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import redis

from .. import connection, keys, scripts
from ..conf import QueueSpec

# How long a paused-set read stays fresh in basic mode (reliable fetch checks per call).
PAUSED_REFRESH = 2.0


@dataclass(frozen=True)
class Work:
    """One fetched job: its queue and its raw payload exactly as it sits in Redis."""

    queue: str
    raw: str


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


def text(value: Any) -> str:
    """A raw payload (or name) read from Redis as text. Bytes that are not UTF-8 are kept
    as surrogates, so :func:`wire` gives back exactly what Redis holds."""
    return value.decode("utf-8", errors="surrogateescape") if isinstance(value, bytes) else value


def wire(raw: str) -> bytes:
    """The exact bytes of a raw payload read with :func:`text`: what to send back to
    Redis to ack, file or requeue it (a plain str with surrogates can't be sent)."""
    return raw.encode("utf-8", errors="surrogateescape")


class ReliableFetch:
    name = "reliable"
    blocking = False

    def __init__(self, identity: str, queues: tuple[QueueSpec, ...]) -> None:
        self.identity = identity
        self.queues = queues
        self.inprogress = keys.inprogress(identity)
        self.paused = keys.paused()
        self._script = scripts.get("fetch")

    def fetch(self, conn: redis.Redis, ack: Work | None = None) -> Work | None:
        """Ack ``ack`` (if any) and take the next job, in one round trip."""
        works = self.fetch_many(conn, [ack.raw] if ack else [], 1)
        return works[0] if works else None

    def fetch_many(self, conn: redis.Redis, acks: list[str], count: int) -> list[Work]:
        """Ack ``acks`` and take up to ``count`` jobs, in one round trip (see
        dispatch.py for how a pool of threads shares it)."""
        order = weighted_order(self.queues)
        result = self._script(
            conn,
            [
                self.inprogress,
                self.paused,
                *(keys.queue(q) for q in order),
                *(keys.priority_queue(q) for q in order),  # django.tasks priorities
            ],
            [len(acks), *map(wire, acks), count, *order],
        )
        if not result:
            return []
        return [Work(text(result[i]), text(result[i + 1])) for i in range(0, len(result), 2)]

    def ack(self, conn: redis.Redis, raw: str) -> None:
        conn.lrem(self.inprogress, 1, wire(raw))

    def settle_key(self) -> str:
        return self.inprogress


class BasicFetch:
    name = "basic"
    blocking = True

    def __init__(self, identity: str, queues: tuple[QueueSpec, ...]) -> None:
        self.identity = identity
        self.queues = queues
        self._paused: set[str] = set()
        self._paused_at = 0.0
        self._take = scripts.get("basic_fetch")

    def _active(self, conn: redis.Redis) -> list[str]:
        now = time.monotonic()
        if now - self._paused_at > PAUSED_REFRESH:
            try:
                self._paused = {text(m) for m in conn.smembers(keys.paused())}
            except redis.ResponseError:
                self._paused = set()  # a paused set of the wrong type pauses nothing
            self._paused_at = now
        return [q for q in weighted_order(self.queues) if q not in self._paused]

    def fetch(self, conn: redis.Redis, ack: Work | None = None) -> Work | None:
        active = self._active(conn)
        if not active:
            time.sleep(connection.FETCH_BLOCK_SECONDS)
            return None
        by_key = {keys.queue(q): q for q in active}
        # django.tasks priorities wait in zsets BRPOP can't see (priority.py): one
        # non-blocking script takes the next job in priority order from the zsets and
        # lists; BRPOP only waits when it found nothing.
        found = self._take(conn, [*by_key, *(keys.priority_queue(q) for q in active)], active)
        if found:
            return Work(text(found[0]), text(found[1]))
        result = conn.brpop(list(by_key), timeout=connection.FETCH_BLOCK_SECONDS)
        if not result:
            return None
        return Work(by_key[text(result[0])], text(result[1]))

    def ack(self, conn: redis.Redis, raw: str) -> None:
        """Nothing to do: BRPOP already removed the job from Redis."""

    def settle_key(self) -> str:
        return ""


def for_mode(mode: str, identity: str, queues: tuple[QueueSpec, ...]):
    return (ReliableFetch if mode == "reliable" else BasicFetch)(identity, queues)
