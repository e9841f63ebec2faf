"""The sorted sets of jobs: ``ScheduledSet``, ``RetrySet`` and ``DeadSet``.

Members are raw payload JSON scored by epoch (run at, retry at, failed at). Reads are
paginated by rank (ZRANGE with offsets: O(log n) at any depth) or searched with a
bounded ZSCAN (search.py); nothing ever loads a whole set.

Actions add before they remove, in one script (rule 2), with new payloads built here in
Python (rule 3). A job that leaves the system (delete, kill, delete all) releases its
locks; releases that fail are deferred and retried before the next action.
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from .. import conf, departures, keys, locks, payload, priority, scripts
from . import search as scanning
from ._util import as_bytes, client
from .records import JobRecord, parse_entry_key

# Entries read, moved or removed per round trip by the bulk actions.
BULK_BATCH = 500


class Outcome(enum.StrEnum):
    DONE = "done"  # moved or removed
    GONE = "gone"  # no longer there (a poller or another operator was first)
    INVALID = "invalid"  # can't go to a queue: undecodable, or no queue named


@dataclass
class BulkResult:
    done: int = 0
    gone: int = 0
    invalid: int = 0


def requeue_route(job: dict[str, Any]) -> priority.Route | None:
    """Where and how a job goes back to its queue, or None if it can't: ``enqueued_at``
    re-stamped (queue latency is measured from it), ``at`` dropped, ``retry_count`` kept
    (a dead job retried by hand gets one more attempt, not a fresh set); a django.tasks
    priority waits in its queue's zset, as when the poller moves it (priority.route)."""
    queue = job.get("queue")
    if job.get("func") == payload.UNPARSEABLE or not isinstance(queue, str) or not queue:
        return None
    fresh = dict(job)
    fresh.pop("at", None)
    fresh["enqueued_at"] = time.time()
    return priority.route(fresh)


class JobSet:
    """Common reads and actions; subclasses name the key and the order."""

    name: ClassVar[str]  # "schedule", "retry" or "dead"
    newest_first: ClassVar[bool] = False

    @property
    def key(self) -> str:
        key: str = getattr(keys, self.name)()
        return key

    # Reads ------------------------------------------------------------------------------

    def size(self) -> int:
        return int(client().zcard(self.key))

    def page(self, start: int = 0, count: int = 25) -> list[JobRecord]:
        """Entries ``start`` .. ``start + count - 1`` in display order."""
        start = max(int(start), 0)
        end = start + max(int(count), 1) - 1
        conn = client()
        if self.newest_first:
            rows = conn.zrevrange(self.key, start, end, withscores=True)
        else:
            rows = conn.zrange(self.key, start, end, withscores=True)
        return [JobRecord.from_raw(raw, float(score), self.name) for raw, score in rows]

    def get(self, entry_key: str) -> JobRecord | None:
        """The entry with this :attr:`JobRecord.key`, or None if it has gone."""
        parsed = parse_entry_key(entry_key)
        if parsed is None:
            return None
        score, digest = parsed
        rows = client().zrangebyscore(self.key, score, score, withscores=True)
        for raw, s in rows:
            if hashlib.sha1(as_bytes(raw)).hexdigest().startswith(digest):
                return JobRecord.from_raw(raw, float(s), self.name)
        return None

    def search(
        self, term: str, cursor: int = 0, count: int = 25, budget: int = scanning.SEARCH_BUDGET
    ) -> scanning.SearchPage:
        """Entries whose payload contains ``term`` (any case), in scan order; continue
        with the returned cursor until it is 0. At most ``budget`` ZSCAN calls."""
        return scanning.scan(
            client(),
            self.key,
            scanning.contains_pattern(term),
            self.name,
            cursor=cursor,
            want=count,
            budget=budget,
        )

    def find(self, jid: str, budget: int = scanning.FIND_BUDGET) -> JobRecord | None:
        """The entry with this jid, looking at about 300,000 entries at most (see
        search.FIND_BUDGET; None when not found within that cap)."""
        page = scanning.scan(
            client(),
            self.key,
            scanning.jid_pattern(jid),
            self.name,
            want=1,
            budget=budget,
            scan_count=scanning.FIND_SCAN_COUNT,
        )
        for record in page.records:
            if record.jid == jid:
                return record
        return None

    def iter_records(self, batch: int = BULK_BATCH) -> Iterator[JobRecord]:
        """Every entry in display order, read ``batch`` at a time (for scripts)."""
        start = 0
        while True:
            rows = self.page(start, batch)
            yield from rows
            if len(rows) < batch:
                return
            start += batch

    # Actions ----------------------------------------------------------------------------

    def retry(self, record: JobRecord) -> Outcome:
        """Send the entry to its queue now ("retry now" / "enqueue now")."""
        locks.retry_deferred()
        where = requeue_route(record.job)
        if where is None:
            return Outcome.INVALID
        moved = scripts.run(
            "requeue_due",
            client(),
            [self.key, where.key, keys.queues()],
            [record.raw, where.value, record.queue, where.score_arg],
        )
        return Outcome.DONE if moved else Outcome.GONE

    def delete(self, record: JobRecord) -> Outcome:
        """Remove the entry; the job leaves the system, so its locks are released."""
        locks.retry_deferred()
        if not client().zrem(self.key, record.raw):
            return Outcome.GONE
        departures.job_left(record.job, f"deleted from {self.name} by an operator")
        return Outcome.DONE

    def retry_all(self, batch: int = BULK_BATCH, until: float | None = None) -> BulkResult:
        """Send every entry scored up to ``until`` (default: the highest score when the
        call starts, so entries added meanwhile are left alone) to its queue, ``batch``
        per round trip. Entries that can't be requeued stay where they are."""
        locks.retry_deferred()
        conn, result = client(), BulkResult()
        last = _last_score(conn, self.key) if until is None else until
        if last is None:
            return result
        script = scripts.get("requeue_due")
        offset = 0  # entries left in place sit at the lowest ranks
        while True:
            rows = conn.zrange(self.key, offset, offset + batch - 1, withscores=True)
            rows = [(raw, score) for raw, score in rows if score <= last]
            if not rows:
                return result
            conn.script_load(script.source)  # the pipeline below can't reload it
            pipe = conn.pipeline(transaction=False)
            queued = 0
            for raw, _score in rows:
                job = payload.decode(raw)
                where = requeue_route(job)
                if where is None:
                    result.invalid += 1
                    offset += 1
                    continue
                q = job["queue"]
                pipe.evalsha(
                    script.sha,
                    3,
                    self.key,
                    where.key,
                    keys.queues(),
                    raw,
                    where.value,
                    q,
                    where.score_arg,
                )
                queued += 1
            for moved in pipe.execute() if queued else ():
                if moved:
                    result.done += 1
                else:
                    result.gone += 1
            if len(rows) < batch:
                return result

    def delete_all(self, batch: int = BULK_BATCH, until: float | None = None) -> BulkResult:
        """Remove every entry scored up to ``until`` (default: the highest score when the
        call starts), ``batch`` per round trip, releasing the locks of those that hold
        any."""
        locks.retry_deferred()
        conn, result = client(), BulkResult()
        last = _last_score(conn, self.key) if until is None else until
        if last is None:
            return result
        while True:
            rows = conn.zrange(self.key, 0, batch - 1, withscores=True)
            members = [raw for raw, score in rows if score <= last]
            if not members:
                return result
            removed = conn.zrem(self.key, *members)
            result.done += int(removed)
            result.gone += len(members) - int(removed)
            for raw in members:
                departures.job_left(payload.decode(raw), f"deleted from {self.name} by an operator")
            if len(members) < batch:
                return result


def _last_score(conn: Any, key: str) -> float | None:
    rows = conn.zrevrange(key, 0, 0, withscores=True)
    return float(rows[0][1]) if rows else None


class ScheduledSet(JobSet):
    """``P:schedule``: jobs to run later, soonest first. ``retry`` enqueues one now."""

    name = "schedule"


class RetrySet(JobSet):
    """``P:retry``: failed jobs waiting for their next attempt, soonest first."""

    name = "retry"

    def kill(self, record: JobRecord) -> Outcome:
        """Move the entry to dead now (added there before it leaves retry, rule 2); a job
        in dead holds no locks, so they are released."""
        locks.retry_deferred()
        conn = client()
        job = record.job
        new = record.raw if not record.unparseable else payload.encode(job)
        moved = scripts.run(
            "requeue_due",
            conn,
            [self.key, keys.dead(), keys.queues()],
            [record.raw, new, "", repr(time.time())],
        )
        if not moved:
            return Outcome.GONE
        _trim_dead(conn)
        departures.job_left(job, "killed (moved to dead) by an operator")
        return Outcome.DONE


def _trim_dead(conn: Any) -> None:
    # Same caps as the worker applies when it files a job in dead (DEAD_TIMEOUT, DEAD_MAX_JOBS).
    oldest, keep = conf.dead_trim()
    pipe = conn.pipeline(transaction=False)
    pipe.zremrangebyscore(keys.dead(), "-inf", f"({oldest!r}")
    pipe.zremrangebyrank(keys.dead(), 0, -(keep + 1))
    pipe.execute(raise_on_error=False)


class DeadSet(JobSet):
    """``P:dead``: jobs out of retries (or never retried), most recent first."""

    name = "dead"
    newest_first = True


__all__ = [
    "BulkResult",
    "DeadSet",
    "JobSet",
    "Outcome",
    "RetrySet",
    "ScheduledSet",
    "requeue_route",
]
