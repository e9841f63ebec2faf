"""``Snapshot``: the numbers a monitoring scrape wants, read in a fixed number of round
trips whatever the number of queues, processes or periodic entries.

    from cogworker_django.api.snapshot import Snapshot
    s = Snapshot.read()
    s.queues, s.dead, s.busy

Round trips: the queue listing and one pipeline over every queue (``Queue.overview``),
the process registry and one pipeline over every process (``ProcessSet.list``), one
pipeline for the counters and set sizes, one for the periodic entries; the count of
quarantined copies is a SCAN over the keyspace, so it is kept for
:data:`QUARANTINE_REFRESH` seconds in this process between reads.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import redis

from ..store import keys, runtime
from ._util import client
from .jobs import DeadSet, RetrySet, ScheduledSet
from .periodic import PeriodicEntries, PeriodicEntry
from .processes import ProcessRecord, ProcessSet
from .quarantine import Quarantine
from .queues import Queue, QueueInfo

# Seconds a count of quarantined copies is reused (the key guard moves a key at most once
# per KEYGUARD_INTERVAL, 60 s by default).
QUARANTINE_REFRESH = 60.0

_quarantine_lock = threading.Lock()


class _QuarantineCounts(dict[str, tuple[float, int]]):
    """Quarantine root -> (when counted, the count), on the runtime (store/runtime.py)."""


def _count(value: object) -> int:
    """A counter string (or None, or a wrong-type error) as an int."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return 0
    try:
        return int(value or 0)
    except ValueError:
        return 0


@dataclass
class Snapshot:
    processed: int = 0
    failed: int = 0
    scheduled: int = 0
    retries: int = 0
    dead: int = 0
    quarantined: int = 0
    queues: list[QueueInfo] = field(default_factory=list)
    processes: list[ProcessRecord] = field(default_factory=list)
    periodic: list[PeriodicEntry] = field(default_factory=list)
    read_at: float = 0.0

    @property
    def busy(self) -> int:
        return sum(p.busy for p in self.processes)

    @property
    def concurrency(self) -> int:
        return sum(p.concurrency or 0 for p in self.processes)

    @classmethod
    def read(cls) -> Snapshot:
        conn = client()
        pipe = conn.pipeline(transaction=False)
        pipe.get(keys.stat("processed"))
        pipe.get(keys.stat("failed"))
        for s in (ScheduledSet, RetrySet, DeadSet):
            pipe.zcard(s().key)
        replies = pipe.execute(raise_on_error=False)
        for reply in replies:
            # A key of the wrong type reads as 0 (the key guard moves it aside); an
            # outage raises.
            if isinstance(reply, Exception) and not isinstance(reply, redis.ResponseError):
                raise reply
        processed, failed, scheduled, retries, dead = (_count(r) for r in replies)
        return cls(
            processed=processed,
            failed=failed,
            scheduled=scheduled,
            retries=retries,
            dead=dead,
            quarantined=quarantined_count(),
            queues=Queue.overview(),
            processes=ProcessSet().list(),
            periodic=PeriodicEntries().list(),
            read_at=time.time(),
        )


def quarantined_count(max_age: float = QUARANTINE_REFRESH) -> int:
    """The number of quarantined copies, counted at most every ``max_age`` seconds."""
    root = keys.quarantine_root(keys.root())  # the cache's key: one count per prefix
    now = time.monotonic()
    counts = runtime.current().of(_QuarantineCounts)
    with _quarantine_lock:
        cached = counts.get(root)
    if cached is not None and now - cached[0] < max_age:
        return cached[1]
    n = Quarantine().count()
    with _quarantine_lock:
        counts[root] = (now, n)
    return n
