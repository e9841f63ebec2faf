"""The sorted sets of jobs: ``ScheduledSet``, ``RetrySet`` and ``DeadSet``.

(Over 400 lines: the three sets share every read and action, over one home or many.)

Members are raw payload JSON scored by epoch (run at, retry at, failed at). Reads are
paginated by rank (ZRANGE with offsets: O(log n) at any depth) or searched with a
bounded ZSCAN (search.py); nothing ever loads a whole set.

With a home per queue (keys.py, a Redis Cluster) each set is one sorted set per home:
sizes are summed, pages merged by score, searches and bulk actions walk the homes in
turn, and an action on an entry runs in the home it was read from (its record's
``home``), so each script touches one slot.

Actions add before they remove, in one script (rule 2), with new payloads built here in
Python (rule 3). A job that leaves the system (delete, kill, delete all) releases its
locks; releases that fail are deferred and retried before the next action.
"""

from __future__ import annotations

import enum
import hashlib
import heapq
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from .. import conf
from ..core import departures, locks, payload, route
from ..store import bell, homes, keys, scripts
from . import search as scanning
from ._util import as_bytes, client
from .records import JobRecord, parse_entry_key

# Entries read, moved or removed per round trip by the bulk actions.
BULK_BATCH = 500
# A search cursor over several homes: the home's index in its low bits, the ZSCAN
# cursor of that home's set above them.
HOME_BITS = 16


class Outcome(enum.StrEnum):
    DONE = "done"  # moved or removed
    GONE = "gone"  # no longer there (a poller or another operator was first)
    INVALID = "invalid"  # can't go to a queue: undecodable, or no queue named


@dataclass
class BulkResult:
    done: int = 0
    gone: int = 0
    invalid: int = 0


def requeue_route(job: dict[str, Any]) -> route.Destination | None:
    """Where and how a job goes back to its queue, or None if it can't: ``enqueued_at``
    re-stamped (queue latency is measured from it), ``at`` dropped, ``retry_count`` kept
    (a dead job retried by hand gets one more attempt, not a fresh set); a django.tasks
    priority waits in its queue's zset, as when the poller moves it (route.to_queue)."""
    queue = job.get("queue")
    if job.get("func") == payload.UNPARSEABLE or not isinstance(queue, str) or not queue:
        return None
    return route.to_queue(dict(job), time.time())


class JobSet:
    """Common reads and actions; subclasses name the key and the order."""

    name: ClassVar[str]  # "schedule", "retry" or "dead"
    newest_first: ClassVar[bool] = False

    @property
    def key(self) -> str:
        """The set in the prefix's home: the only one without a home per queue."""
        return self.key_in(keys.root())

    def key_in(self, home: str) -> str:
        key: str = getattr(keys, self.name)(home)
        return key

    def _homes(self, conn: Any) -> list[homes.Home]:
        return homes.all_homes(conn)

    def _record(self, raw: Any, score: Any, home: str) -> JobRecord:
        record = JobRecord.from_raw(raw, float(score), self.name)
        return replace(record, home=home)

    def key_of(self, record: JobRecord) -> str:
        """The set ``record`` was read from (its job's home when it says none)."""
        return self.key_in(record.home or homes.job_home(record.job))

    # Reads ------------------------------------------------------------------------------

    def size(self) -> int:
        conn = client()
        every = self._homes(conn)
        if len(every) == 1:
            return int(conn.zcard(self.key_in(every[0])))
        pipe = conn.pipeline(transaction=False)
        for home in every:
            pipe.zcard(self.key_in(home))
        return sum(int(n) for n in pipe.execute())

    def page(self, start: int = 0, count: int = 25) -> list[JobRecord]:
        """Entries ``start`` .. ``start + count - 1`` in display order (over several
        homes: the first ``start + count`` of each, merged by score)."""
        start = max(int(start), 0)
        end = start + max(int(count), 1) - 1
        conn = client()
        every = self._homes(conn)
        first = 0 if len(every) > 1 else start
        pipe = conn.pipeline(transaction=False)
        for home in every:
            if self.newest_first:
                pipe.zrevrange(self.key_in(home), first, end, withscores=True)
            else:
                pipe.zrange(self.key_in(home), first, end, withscores=True)
        rows = [
            [(float(score), raw, home) for raw, score in found]
            for home, found in zip(every, pipe.execute(), strict=True)
        ]
        merged = heapq.merge(*rows, key=lambda row: row[0], reverse=self.newest_first)
        picked = list(merged)[start - first : end - first + 1]
        return [self._record(raw, score, home) for score, raw, home in picked]

    def get(self, entry_key: str) -> JobRecord | None:
        """The entry with this :attr:`JobRecord.key`, or None if it has gone."""
        parsed = parse_entry_key(entry_key)
        if parsed is None:
            return None
        score, digest = parsed
        conn = client()
        for home in self._homes(conn):
            for raw, s in conn.zrangebyscore(self.key_in(home), score, score, withscores=True):
                if hashlib.sha1(as_bytes(raw)).hexdigest().startswith(digest):
                    return self._record(raw, s, home)
        return None

    def search(
        self, term: str, cursor: int = 0, count: int = 25, budget: int = scanning.SEARCH_BUDGET
    ) -> scanning.SearchPage:
        """Entries whose payload contains ``term`` (any case), in scan order; continue
        with the returned cursor until it is 0. At most ``budget`` ZSCAN calls."""
        return self._scan(scanning.contains_pattern(term), cursor, count, budget)

    def find(self, jid: str, budget: int = scanning.FIND_BUDGET) -> JobRecord | None:
        """The entry with this jid, looking at about 300,000 entries at most in each
        home (see search.FIND_BUDGET; None when not found within that cap)."""
        conn = client()
        for home in self._homes(conn):
            page = scanning.scan(
                conn,
                self.key_in(home),
                scanning.jid_pattern(jid),
                self.name,
                want=1,
                budget=budget,
                scan_count=scanning.FIND_SCAN_COUNT,
            )
            for record in page.records:
                if record.jid == jid:
                    return replace(record, home=home)
        return None

    def _scan(self, pattern: str, cursor: int, count: int, budget: int) -> scanning.SearchPage:
        conn = client()
        every = self._homes(conn)
        if len(every) == 1:
            return scanning.scan(
                conn,
                self.key_in(every[0]),
                pattern,
                self.name,
                cursor=cursor,
                want=count,
                budget=budget,
            )
        # Several homes: one cursor walks them in turn (a home listed meanwhile may be
        # passed over by a search already under way).
        mask = (1 << HOME_BITS) - 1
        index, inner = int(cursor) & mask, int(cursor) >> HOME_BITS
        out = scanning.SearchPage()
        while index < len(every) and out.calls < budget and len(out.records) < count:
            home = every[index]
            page = scanning.scan(
                conn,
                self.key_in(home),
                pattern,
                self.name,
                cursor=inner,
                want=count - len(out.records),
                budget=budget - out.calls,
            )
            out.calls += page.calls
            out.records += [replace(r, home=home) for r in page.records]
            inner = page.cursor
            if inner == 0:
                index += 1
        out.cursor = 0 if index >= len(every) else (inner << HOME_BITS) | index
        return out

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
        key = self.key_of(record)
        if where is None or not _same_home(key, where.key):
            return Outcome.INVALID
        script_keys = [key, where.key, *_listing(key)]
        args = [record.raw, where.value, record.queue, where.score_arg]
        bell.add(script_keys, args, where.queue)  # an idle worker starts it at once
        moved = scripts.run("requeue_due", client(), script_keys, args)
        return Outcome.DONE if moved else Outcome.GONE

    def delete(self, record: JobRecord) -> Outcome:
        """Remove the entry; the job leaves the system, so its locks are released."""
        locks.retry_deferred()
        if not client().zrem(self.key_of(record), record.raw):
            return Outcome.GONE
        departures.job_left(record.job, f"deleted from {self.name} by an operator")
        return Outcome.DONE

    def retry_all(self, batch: int = BULK_BATCH, until: float | None = None) -> BulkResult:
        """Send every entry scored up to ``until`` (default: the highest score when the
        call starts, so entries added meanwhile are left alone) to its queue, ``batch``
        per round trip. Entries that can't be requeued stay where they are."""
        locks.retry_deferred()
        conn, result = client(), BulkResult()
        every = self._homes(conn)
        until = self._bound(conn, every) if until is None else until
        if until is None:
            return result
        for home in every:
            self._retry_home(conn, home, batch, until, result)
        return result

    def _bound(self, conn: Any, every: Sequence[str]) -> float | None:
        """The highest score in any home's set now (None when every one is empty): a bulk
        action stops there, so entries added meanwhile are left alone."""
        lasts = [s for s in (_last_score(conn, self.key_in(h)) for h in every) if s is not None]
        return max(lasts) if lasts else None

    def _retry_home(
        self, conn: Any, home: str, batch: int, last: float, result: BulkResult
    ) -> None:
        key = self.key_in(home)
        script = scripts.get("requeue_due")
        offset = 0  # entries left in place sit at the lowest ranks
        while True:
            rows = conn.zrange(key, offset, offset + batch - 1, withscores=True)
            rows = [(raw, score) for raw, score in rows if score <= last]
            if not rows:
                return
            conn.script_load(script.source)  # the pipeline below can't reload it
            pipe = conn.pipeline(transaction=False)
            queued = 0
            for raw, _score in rows:
                job = payload.decode(raw)
                where = requeue_route(job)
                if where is None or not _same_home(key, where.key):
                    result.invalid += 1
                    offset += 1
                    continue
                targets = [key, where.key, *_listing(key)]
                pipe.evalsha(
                    script.sha,
                    len(targets),
                    *targets,
                    raw,
                    where.value,
                    job["queue"],
                    where.score_arg,
                )
                queued += 1
            for moved in pipe.execute() if queued else ():
                if moved:
                    result.done += 1
                else:
                    result.gone += 1
            if len(rows) < batch:
                return

    def delete_all(self, batch: int = BULK_BATCH, until: float | None = None) -> BulkResult:
        """Remove every entry scored up to ``until`` (default: the highest score when the
        call starts), ``batch`` per round trip, releasing the locks of those that hold
        any."""
        locks.retry_deferred()
        conn, result = client(), BulkResult()
        every = self._homes(conn)
        until = self._bound(conn, every) if until is None else until
        if until is None:
            return result
        for home in every:
            key = self.key_in(home)
            while True:
                rows = conn.zrange(key, 0, batch - 1, withscores=True)
                members = [raw for raw, score in rows if score <= until]
                if not members:
                    break
                removed = conn.zrem(key, *members)
                result.done += int(removed)
                result.gone += len(members) - int(removed)
                for raw in members:
                    departures.job_left(
                        payload.decode(raw), f"deleted from {self.name} by an operator"
                    )
                if len(members) < batch:
                    break
        return result


def _listing(key: str) -> list[str]:
    """KEYS[3] of lua/requeue_due.lua moving from ``key``: P:queues, unless it is in
    another slot than ``key``'s home."""
    return homes.Home(keys.home_part(key)).listing_keys()


def _same_home(key: str, target: str) -> bool:
    """One script may move an entry from ``key`` to ``target`` (one slot)."""
    return keys.home_part(key) == keys.home_part(target)


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
        key = self.key_of(record)
        home = keys.home_part(key)
        moved = scripts.run(
            "requeue_due",
            conn,
            [key, keys.dead(home), *_listing(key)],
            [record.raw, new, "", repr(time.time())],
        )
        if not moved:
            return Outcome.GONE
        _trim_dead(conn, home)
        departures.job_left(job, "killed (moved to dead) by an operator")
        return Outcome.DONE


def _trim_dead(conn: Any, home: str) -> None:
    # Same caps as the worker applies when it files a job in dead (DEAD_TIMEOUT,
    # DEAD_MAX_JOBS: per home, as the worker trims the set it files in).
    oldest, keep = conf.dead_trim()
    pipe = conn.pipeline(transaction=False)
    pipe.zremrangebyscore(keys.dead(home), "-inf", f"({oldest!r}")
    pipe.zremrangebyrank(keys.dead(home), 0, -(keep + 1))
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
