"""The job controls for operators: ``cancel(jid)`` and ``Limits`` (what each limiter of
``COGWORKER["LIMITS"]`` holds now).

``cancel`` looks where a job waits, in the order it moves (each queue, the schedule,
retries) and removes it there, its locks released and its listeners told (a django.tasks
result becomes FAILED: departures.py); a job found running (on a process's in-progress
list, or in its work snapshot) is flagged in ``P:cancels`` and its process told at once
on its signal channel: inside the job ``cancelled()`` turns True, and the worker
interrupts it with ``JobCancelled`` after ``CANCEL_GRACE`` if it never checks.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from .. import conf
from ..controls import limits
from ..controls.spec import LimitSpec
from ..core import departures, locks, payload, priority
from ..store import homes, keys
from ._util import as_datetime, client, text
from .find import clean_jid
from .jobs import JobSet, Outcome, RetrySet, ScheduledSet
from .queues import Queue
from .records import JobRecord

# A cancel flag outlives its run by at most this (a run that never saw it, say).
CANCEL_FLAG_TTL = 86400


def cancel(jid: str) -> str | None:
    """Cancel job ``jid``: "queue", "scheduled" or "retry" (removed), "running" (flagged),
    or None when it is none of these (finished, dead, or unknown)."""
    jid = clean_jid(jid)
    locks.retry_deferred()
    conn = client()
    for name in Queue.names():
        record = Queue(name).find(jid)
        if record is not None and conn.lrem(keys.queue(name), 1, record.raw):
            departures.job_left(record.job, f"cancelled by an operator while queued in {name}")
            return "queue"
        if _cancel_prioritised(conn, name, jid):
            return "queue"
    for where, job_set in (("scheduled", ScheduledSet()), ("retry", RetrySet())):
        record = job_set.find(jid)
        if record is not None and cancel_entry(job_set, record) == Outcome.DONE:
            return where
    holders = running_on(jid)
    if not holders:
        return None
    now = time.time()
    pipe = conn.pipeline(transaction=False)
    pipe.zadd(keys.cancels(), {jid: now})
    pipe.zremrangebyscore(keys.cancels(), "-inf", now - CANCEL_FLAG_TTL)
    for identity in holders:
        pipe.publish(keys.signal(identity), f"cancel:{jid}")
    replies = pipe.execute(raise_on_error=False)
    if isinstance(replies[0], Exception):
        raise replies[0]  # the flag is what counts; the signals only make it quicker
    return "running"


def _cancel_prioritised(conn: Any, queue: str, jid: str) -> bool:
    """A django.tasks task waiting with a priority (``P:pqueue:<q>``, priority.py)."""
    key = keys.priority_queue(queue)
    for member, _score in conn.zscan_iter(key, match=f'*"jid":"{jid}"*', count=500):
        job = payload.decode(priority.payload_of(member), queue)
        if job.get("jid") == jid and conn.zrem(key, member):
            departures.job_left(job, f"cancelled by an operator while queued in {queue}")
            return True
    return False


def cancel_entry(job_set: JobSet, record: JobRecord) -> Outcome:
    """Cancel one entry of the schedule or the retries (the admin's Cancel): removed,
    its locks released, its listeners told; GONE when it had left already."""
    locks.retry_deferred()
    if not client().zrem(job_set.key_of(record), record.raw):
        return Outcome.GONE
    departures.job_left(record.job, f"cancelled by an operator while in {job_set.name}")
    return Outcome.DONE


def running_on(jid: str) -> list[str]:
    """Identities of the live processes running ``jid`` now: on their in-progress list
    (reliable fetch) or in their work snapshot (any fetch mode)."""
    conn = client()
    idents = sorted(
        {text(m) for m in conn.smembers(keys.processes())}
        | {text(m) for m in conn.smembers(keys.inprogress_ids())}
    )
    if not idents:
        return []
    lists = homes.inprogress_keys(conn, idents)
    pipe = conn.pipeline(transaction=False)
    for ident in idents:
        pipe.exists(keys.process(ident))
        pipe.hvals(keys.work(ident))
        for key in lists[ident]:
            pipe.lrange(key, 0, -1)
    replies = iter(pipe.execute(raise_on_error=False))
    needle = f'"jid":"{jid}"'
    escaped = f'\\"jid\\":\\"{jid}\\"'  # a payload inside the work snapshot's JSON
    found = []
    for ident in idents:
        alive, work = next(replies), next(replies)
        listed = [next(replies) for _ in lists[ident]]
        if isinstance(alive, Exception) or not alive:
            continue
        rows = [text(r) for part in listed if isinstance(part, list) for r in part]
        rows += [text(r) for r in (work if isinstance(work, list) else [])]
        if any(needle in row or escaped in row for row in rows):
            found.append(ident)
    return found


@dataclass(frozen=True)
class LeaseHolder:
    """One concurrency lease: the run holding it and when it lapses unless refreshed."""

    jid: str
    job: str
    identity: str
    lapses_at: dt.datetime | None
    # Held by a run the watchdog abandoned (its body still stuck inside the job): the
    # lease is kept until the body returns or its process is gone.
    abandoned: bool = False


@dataclass(frozen=True)
class LimitInfo:
    name: str
    concurrency: int | None
    rate: int | None
    per: float | None
    in_use: int  # live leases
    holders: list[LeaseHolder]
    recent_starts: int  # starts in the last ``per`` seconds
    waiting: int = 0  # jobs refused by it, waiting in the schedule for its room

    @property
    def describe(self) -> str:
        parts = []
        if self.concurrency:
            parts.append(f"at most {self.concurrency} at once")
        if self.rate:
            parts.append(f"at most {self.rate} starts per {self.per:g} s")
        return ", ".join(parts)


class Limits:
    """The limiters of ``COGWORKER["LIMITS"]`` and their use now (one round trip)."""

    @staticmethod
    def names() -> list[str]:
        return sorted(conf.get().LIMITS)

    def all(self) -> list[LimitInfo]:
        specs = [conf.get().LIMITS[n] for n in self.names()]
        if not specs:
            return []
        conn = client()
        now = _redis_now(conn)
        pipe = conn.pipeline(transaction=False)
        for s in specs:
            pipe.zrangebyscore(keys.limit_leases(s.name), now, "+inf", withscores=True)
            pipe.zcount(keys.limit_starts(s.name), f"({now - (s.per or 0)}", "+inf")
            pipe.zcard(keys.limit_waiting(s.name))
        replies = pipe.execute(raise_on_error=False)
        return [
            self._info(s, replies[3 * i], replies[3 * i + 1], replies[3 * i + 2])
            for i, s in enumerate(specs)
        ]

    def get(self, name: str) -> LimitInfo | None:
        return next((i for i in self.all() if i.name == name), None)

    @staticmethod
    def _info(s: LimitSpec, leases: Any, starts: Any, waiting: Any = 0) -> LimitInfo:
        holders = []
        for member, score in leases if isinstance(leases, list) else []:
            token, _, rest = text(member).partition("|")
            jid, _, rest = rest.partition("|")
            job, _, identity = rest.partition("|")
            holders.append(
                LeaseHolder(jid, job, identity, as_datetime(score), limits.abandoned(token))
            )
        return LimitInfo(
            s.name,
            s.concurrency,
            s.rate,
            s.per,
            len(holders),
            holders,
            int(starts) if s.rate and isinstance(starts, int) else 0,
            waiting if isinstance(waiting, int) else 0,
        )


def _redis_now(conn: Any) -> float:
    try:
        seconds, micros = conn.time()
        return int(seconds) + int(micros) / 1e6
    except Exception:  # noqa: BLE001 - TIME refused by some proxies: this host's clock
        return time.time()
