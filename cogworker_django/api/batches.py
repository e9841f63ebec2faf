"""Batches, chains and groups: their progress, members and callbacks (workflows).

    from cogworker_django.api import Batches
    batches = Batches()
    for b in batches.list(0, 25):
        print(b.bid, b.kind, b.state, b.succeeded, "/", b.expected)
    batches.members(bid)       # each member's jid and where it stands
    batches.pending_jids(bid)  # members that have not succeeded yet

A batch lives in Redis until ``BATCH_TTL`` after on_success fired, or
``BATCH_UNFINISHED_TTL`` after its last activity while unfinished; the listing forgets
the ones that are gone.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from ..store import keys
from ..workflows.status import BatchRecord, Failure
from ._util import client, text

__all__ = ["BatchMember", "BatchRecord", "Batches", "Failure"]

# A member of a batch, as the admin shows it.
MEMBER_STATES = ("succeeded", "waiting", "failed", "dead")


@dataclass(frozen=True)
class BatchMember:
    jid: str
    state: str  # "succeeded", "waiting" (no outcome yet), "failed" (will retry), "dead"
    failure: Failure | None


class Batches:
    """Every batch Redis still holds, most recently active first."""

    def count(self) -> int:
        return int(client().zcard(keys.batches()))

    def list(self, start: int = 0, count: int = 25) -> list[BatchRecord]:
        """One page of batches; those whose keys have expired are dropped from the
        listing as they are met."""
        bids = [text(b) for b in client().zrevrange(keys.batches(), start, start + count - 1)]
        records = self._read(bids)
        gone = [bid for bid, record in zip(bids, records, strict=True) if record is None]
        if gone:
            client().zrem(keys.batches(), *gone)
        return [r for r in records if r is not None]

    def get(self, bid: str) -> BatchRecord | None:
        """The batch, or None when Redis no longer holds it."""
        return self._read([bid])[0]

    # builtins.list below: in the class body `list` is the method above.
    def _read(self, bids: builtins.list[str]) -> builtins.list[BatchRecord | None]:
        if not bids:
            return []
        pipe = client().pipeline(transaction=False)
        for bid in bids:
            pipe.hgetall(keys.batch(bid))
            pipe.scard(keys.batch_pending(bid))
            pipe.scard(keys.batch_waiting(bid))
            pipe.hgetall(keys.batch_failed(bid))
            pipe.ttl(keys.batch(bid))
        replies = pipe.execute()
        out: builtins.list[BatchRecord | None] = []
        for i, bid in enumerate(bids):
            fields, pending, waiting, failed, ttl = replies[i * 5 : i * 5 + 5]
            if not fields:
                out.append(None)
                continue
            failures = [Failure.parse(jid, raw) for jid, raw in failed.items()]
            out.append(
                BatchRecord.parse(
                    bid, fields, pending=pending, waiting=waiting, failures=failures, ttl=ttl
                )
            )
        return out

    def members(self, bid: str, start: int = 0, count: int = 100) -> builtins.list[BatchMember]:
        """Members in the order they joined, each with where it stands."""
        conn = client()
        jids = [text(j) for j in conn.lrange(keys.batch_jids(bid), start, start + count - 1)]
        if not jids:
            return []
        pipe = conn.pipeline(transaction=False)
        pipe.smismember(keys.batch_pending(bid), jids)
        pipe.smismember(keys.batch_waiting(bid), jids)
        pipe.hmget(keys.batch_failed(bid), jids)
        pending, waiting, failed = pipe.execute()
        out = []
        for jid, is_pending, is_waiting, raw in zip(jids, pending, waiting, failed, strict=True):
            failure = Failure.parse(jid, raw) if raw is not None else None
            if not is_pending:
                state = "succeeded"
            elif failure is not None:
                state = "dead" if failure.dead else "failed"
            else:
                state = "waiting" if is_waiting else "failed"
            out.append(BatchMember(jid, state, failure))
        return out

    def member_count(self, bid: str) -> int:
        return int(client().llen(keys.batch_jids(bid)))

    def pending_jids(self, bid: str, count: int = 1000) -> builtins.list[str]:
        """Up to ``count`` members that have not succeeded yet."""
        found = client().sscan(keys.batch_pending(bid), 0, count=count)[1]
        return sorted(text(j) for j in found)[:count]

    def failed(self, bid: str) -> builtins.list[Failure]:
        """Members whose last run failed and that have not succeeded since."""
        raw = client().hgetall(keys.batch_failed(bid))
        return sorted((Failure.parse(j, v) for j, v in raw.items()), key=lambda f: f.at or 0)
