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

Where a job being enqueued waits is decided in core/route.py for every path that
enqueues (a push, one or in bulk, unique or not; the poller moving due scheduled and
retried jobs; the admin's "retry now" / "enqueue now"), with :func:`routes` and
:func:`member` from here. Paths that put a payload *back* on the queue it was taken from (orphan recovery, the shutdown hand-over, a lost
fetch reply) use :func:`return_key`: the plain list, at the end taken next, so it runs
next, after the queue's positive priorities and before its negative ones.
"""

from __future__ import annotations

import time
from typing import Any

from ..store import keys
from . import payload

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


def return_key(queue: str) -> str:
    """Where a payload taken from ``queue`` goes back to (recovery, hand-over): the list."""
    return keys.queue(queue)


def member(job: dict[str, Any], now: float | None = None) -> tuple[str, float]:
    """(zset member, score) for ``job``; the payload is encoded here, in Python (rule 3)."""
    stamp = int((time.time() if now is None else now) * 1_000_000)
    return f"{stamp:0{STAMP_DIGITS}d}{SEPARATOR}{payload.encode(job)}", float(-of(job))


def payload_of(zset_member: str | bytes) -> str | bytes:
    """The bare payload of a zset member (for listings such as the admin's queue view)."""
    sep = SEPARATOR.encode() if isinstance(zset_member, bytes) else SEPARATOR
    return zset_member.partition(sep)[2]  # type: ignore[arg-type]
