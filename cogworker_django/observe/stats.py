"""Processed and failed counters, in total and per day, buffered in memory.

Never a write per job: processors add to this process's buffer, and the heartbeat
flushes it (one pipeline) every beat and at shutdown. A flush that fails puts its
counts back, so nothing is lost while Redis is away.
"""

from __future__ import annotations

import datetime as dt
import functools
import time

import redis

from ..store import keys, runtime
from ..store.deferred import Deferred

# Per-day counters are kept this long (the dashboard shows 30 days).
DAY_KEY_TTL = 180 * 86400


def today(now: dt.datetime | None = None) -> str:
    """The UTC day as YYYY-MM-DD (per-day counters). On the hot path (one call per job)
    the string is made once per second, not once per call."""
    if now is not None:
        return now.strftime("%Y-%m-%d")
    return _day_of(int(time.time()))


@functools.lru_cache(maxsize=1)
def _day_of(second: int) -> str:
    # (A memo of a pure function: the last second asked, its day.)
    return dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%d")


def _add(a: int, b: int) -> int:
    return a + b


class Counts(Deferred[tuple[str, str], int]):
    """(counter, day) -> the count not written yet; counts added meanwhile add up."""

    def __init__(self) -> None:
        super().__init__("counts", merge=_add)


def incr(name: str, by: int = 1) -> None:
    """Add to this process's buffer (its runtime's, store/runtime.py)."""
    runtime.current().of(Counts).add((name, today()), by)


def pending() -> dict[tuple[str, str], int]:
    return runtime.current().of(Counts).pending()


def flush(conn: redis.Redis) -> None:
    """Write the buffered counts; on failure they are kept for the next flush."""
    buffer = runtime.current().of(Counts)
    counts = buffer.take_all()
    if not counts:
        return
    pipe = conn.pipeline(transaction=False)
    for (name, day), n in counts.items():
        pipe.incrby(keys.stat(name), n)
        pipe.incrby(keys.stat(name, day), n)
        pipe.expire(keys.stat(name, day), DAY_KEY_TTL)
    try:
        results = pipe.execute(raise_on_error=False)
    except Exception:
        # Nothing is known to have landed: keep every count for the next flush.
        buffer.put_back(counts)
        raise
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        # Deterministic (a counter key of the wrong type): retrying can't help, and
        # the key guard moves the key aside. These counts are dropped.
        raise failed[0]
