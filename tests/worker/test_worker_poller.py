"""The scheduled poller: due jobs of the schedule and retry sets move to their queues
(added before removed, payload rebuilt in Python with a fresh enqueued_at); the poll
interval is jittered and scaled to the fleet."""

from __future__ import annotations

import json
import time

from cogworker_django.core import payload
from cogworker_django.store import connection
from cogworker_django.worker import poller


def test_due_jobs_move_to_their_queues_and_future_ones_stay(r, prefix):
    now = time.time()
    due = payload.build("testapp.jobs.record", ["due"], queue="low", jid="due1", at=now - 5)
    due["enqueued_at"] = now - 100
    # A large integer survives the move exactly (rule 3: no Lua cjson).
    retried = payload.build("testapp.jobs.record", [2**62 + 1], jid="retry1")
    retried["retry_count"] = 1
    future = payload.build("testapp.jobs.record", ["later"], jid="future1", at=now + 3600)
    r.zadd(f"{prefix}:schedule", {payload.encode(due): now - 5, payload.encode(future): now + 3600})
    r.zadd(f"{prefix}:retry", {payload.encode(retried): now - 1})
    assert poller.enqueue_due(connection.get_client()) == 2
    (low,) = [json.loads(x) for x in r.lrange(f"{prefix}:queue:low", 0, -1)]
    assert low["jid"] == "due1" and "at" not in low
    assert low["enqueued_at"] >= now
    (default,) = [json.loads(x) for x in r.lrange(f"{prefix}:queue:default", 0, -1)]
    assert default["args"] == [2**62 + 1]
    assert default["retry_count"] == 1
    assert r.zcard(f"{prefix}:retry") == 0
    assert [json.loads(m)["jid"] for m in r.zrange(f"{prefix}:schedule", 0, -1)] == ["future1"]
    assert "low" in r.smembers(f"{prefix}:queues")


def test_due_entry_that_cannot_be_requeued_goes_to_dead(r, prefix):
    now = time.time()
    r.zadd(f"{prefix}:retry", {"not json": now - 1, '{"jid":"x","func":"a.b"}': now - 1})
    assert poller.enqueue_due(connection.get_client()) == 2
    dead = [json.loads(m) for m in r.zrange(f"{prefix}:dead", 0, -1)]
    assert {d["raw_payload"] for d in dead} == {'{"jid":"x","func":"a.b"}', "not json"}
    assert r.zcard(f"{prefix}:retry") == 0


def test_many_due_jobs_move_in_batches(r, prefix):
    now = time.time()
    jobs = {
        payload.encode(payload.build("testapp.jobs.noop", jid=f"b{i}")): now - 1
        for i in range(poller.DUE_BATCH * 2 + 7)
    }
    r.zadd(f"{prefix}:schedule", jobs)
    assert poller.enqueue_due(connection.get_client()) == len(jobs)
    assert r.llen(f"{prefix}:queue:default") == len(jobs)


class _NoRecovery:
    def run(self, conn):
        return 0


def test_poll_interval_is_jittered_and_scaled_to_the_fleet(configure, r, prefix):
    """The fleet's size is what a poll reads from P:processes (not set by hand); the
    pause itself has no other observer than the poller's loop."""
    configure(POLL_INTERVAL=2.0)
    p = poller.Poller(_NoRecovery())
    for count, scale in ((1, 1), (4, 4), (50, poller.MAX_SCALE)):
        r.delete(f"{prefix}:processes")
        r.sadd(f"{prefix}:processes", *(f"host:{i}:x" for i in range(count)))
        p.poll_once()
        pauses = [p._pause() for _ in range(500)]  # noqa: SLF001 - see the docstring
        assert all(2.0 * scale * 0.5 <= x <= 2.0 * scale * 1.5 for x in pauses), count
        assert len(set(pauses)) > 1
