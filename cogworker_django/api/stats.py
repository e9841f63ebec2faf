"""``Stats``: processed/failed counters (total and per UTC day) and the dashboard's
overview, read in as few round trips as possible.

Counters are flushed by each worker's heartbeat, so they lag the truth by up to a beat.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from ..store import homes, keys
from ._util import client, text
from .jobs import DeadSet, RetrySet, ScheduledSet
from .processes import AwaitingRecovery, ProcessRecord, ProcessSet
from .queues import Queue, QueueInfo


@dataclass(frozen=True)
class DayStat:
    date: dt.date
    processed: int
    failed: int


@dataclass
class Overview:
    processed: int = 0
    failed: int = 0
    processed_today: int = 0
    failed_today: int = 0
    scheduled: int = 0
    retries: int = 0
    dead: int = 0
    awaiting_recovery: int = 0  # jobs of dead processes not yet requeued
    queues: list[QueueInfo] = field(default_factory=list)
    processes: list[ProcessRecord] = field(default_factory=list)
    days: list[DayStat] = field(default_factory=list)

    @property
    def enqueued(self) -> int:
        return sum(q.size for q in self.queues)

    @property
    def busy(self) -> int:
        return sum(p.busy for p in self.processes)

    @property
    def concurrency(self) -> int:
        return sum(p.concurrency or 0 for p in self.processes)


def _int(value: object) -> int:
    try:
        return int(text(value) or 0)
    except ValueError:
        return 0


def _days(n: int, today: dt.date | None = None) -> list[dt.date]:
    today = today or dt.datetime.now(dt.UTC).date()
    return [today - dt.timedelta(days=i) for i in range(n - 1, -1, -1)]


class Stats:
    @property
    def processed(self) -> int:
        return _int(client().get(keys.stat("processed")))

    @property
    def failed(self) -> int:
        return _int(client().get(keys.stat("failed")))

    def daily(self, days: int = 30, today: dt.date | None = None) -> list[DayStat]:
        """One entry per UTC day, oldest first, ending today (one MGET per counter)."""
        dates = _days(days, today)
        names = [d.isoformat() for d in dates]
        conn = client()
        pipe = conn.pipeline(transaction=False)
        pipe.mget([keys.stat("processed", n) for n in names])
        pipe.mget([keys.stat("failed", n) for n in names])
        processed, failed = pipe.execute()
        return [
            DayStat(d, _int(p), _int(f)) for d, p, f in zip(dates, processed, failed, strict=True)
        ]

    def overview(self, days: int = 30) -> Overview:
        """Everything the dashboard shows."""
        conn = client()
        pipe = conn.pipeline(transaction=False)
        pipe.mget([keys.stat("processed"), keys.stat("failed")])
        every = homes.all_homes(conn)  # one set per home, summed (api/jobs.py)
        sets = (ScheduledSet(), RetrySet(), DeadSet())
        for s in sets:
            for home in every:
                pipe.zcard(s.key_in(home))
        (processed, failed), *sizes = pipe.execute()
        n = len(every)
        scheduled, retries, dead = (
            sum(int(x) for x in sizes[i * n : (i + 1) * n]) for i in range(3)
        )
        history = self.daily(days)
        return Overview(
            processed=_int(processed),
            failed=_int(failed),
            processed_today=history[-1].processed,
            failed_today=history[-1].failed,
            scheduled=int(scheduled),
            retries=int(retries),
            dead=int(dead),
            awaiting_recovery=AwaitingRecovery().size(),
            queues=Queue.overview(),
            processes=ProcessSet().list(),
            days=history,
        )
