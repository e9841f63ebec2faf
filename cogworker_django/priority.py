"""Priorities (django.tasks, -100..100): a per-queue sorted set beside the queue list.

A job whose payload has a non-zero ``priority`` waits in ``P:pqueue:<q>`` (a zset)
instead of the list ``P:queue:<q>``; priority 0 (every ``@job``, most tasks) stays on
the list, so jobs without a priority cost nothing new. In the zset:

- score = ``-priority``, so the lowest score (ZRANGE 0 0) is the highest priority;
- member = ``<16-digit enqueue time in microseconds>|<payload JSON>``: members of equal
  score sort by the stamp, which keeps FIFO order within one priority (and makes two
  identical payloads two members).

Fetch (lua/fetch.lua, lua/basic_fetch.lua) takes, per queue in the weighted order: the
best zset member if its priority is above 0, else the list's next job, else the best
zset member (priority below 0); it strips the stamp and moves the bare payload on, so
in-progress lists, acks, retries and the dead set only ever see plain payloads.

Paths that put a payload back on a queue *list* (orphan recovery, the shutdown
hand-over, a lost fetch reply) keep it there: it runs next, after the queue's positive
priorities and before its negative ones. The poller routes due scheduled and retried
jobs through :func:`member` so they regain their place.
"""

from __future__ import annotations

import time
from typing import Any

from . import errors, keys, payload

MIN_PRIORITY = -100
MAX_PRIORITY = 100
# Width of the enqueue stamp: microseconds since the epoch fit in 16 digits until 2286.
STAMP_DIGITS = 16
SEPARATOR = "|"


def of(job: dict[str, Any]) -> int:
    """The job's priority, 0 when it has none (or one that isn't a whole number)."""
    value = job.get("priority")
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(MIN_PRIORITY, min(MAX_PRIORITY, value))


def routes(job: dict[str, Any]) -> bool:
    """True when ``job`` waits in its queue's priority zset rather than on the list."""
    return of(job) != 0


def member(job: dict[str, Any], now: float | None = None) -> tuple[str, float]:
    """(zset member, score) for ``job``; the payload is encoded here, in Python (rule 3)."""
    stamp = int((time.time() if now is None else now) * 1_000_000)
    return f"{stamp:0{STAMP_DIGITS}d}{SEPARATOR}{payload.encode(job)}", float(-of(job))


def payload_of(zset_member: str | bytes) -> str | bytes:
    """The bare payload of a zset member (for listings such as the admin's queue view)."""
    sep = SEPARATOR.encode() if isinstance(zset_member, bytes) else SEPARATOR
    return zset_member.partition(sep)[2]  # type: ignore[arg-type]


def push(conn: Any, job: dict[str, Any]) -> str:
    """ZADD ``job`` to its queue's priority zset; returns the jid.

    Rule 1: the ZADD is the write that matters and the only one that can raise; the
    ``P:queues`` listing rides in the same round trip and is only reported.
    """
    queue = job["queue"]
    data, score = member(job)
    pipe = conn.pipeline(transaction=False)
    pipe.zadd(keys.priority_queue(queue), {data: score})
    pipe.sadd(keys.queues(), queue)
    pushed, listed = pipe.execute(raise_on_error=False)
    if isinstance(pushed, Exception):
        raise pushed
    if isinstance(listed, Exception):
        errors.report("Queue listing", listed, f"{keys.queues()} not updated for {queue!r}")
    return job["jid"]
