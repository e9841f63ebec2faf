"""Where a job being enqueued waits (its queue's list, or the priority zset of a
django.tasks priority) is decided once, by ``route.to_queue``: every path that enqueues
(a push, a bulk push, a unique push, the poller moving a due job, the admin's "retry
now" and "retry all") puts a job in the same place, and paths that put a job *back*
(recovery, hand-over) use the list."""

from __future__ import annotations

import json
import time

import pytest

from cogworker_django.api.jobs import DeadSet, RetrySet, ScheduledSet
from cogworker_django.core import client, payload, priority, route
from cogworker_django.store import connection, keys
from cogworker_django.worker import poller

PRIORITIES = [0, 7, -3]


def build(token: str, p: int, **extra) -> dict:
    return payload.build("testapp.jobs.noop", [token], queue="default", priority=p, **extra)


def where(r, token: str) -> str:
    """The key holding the job with this token (list or priority zset)."""
    for raw in r.lrange(keys.queue("default"), 0, -1):
        if json.loads(raw)["args"] == [token]:
            return keys.queue("default")
    for member in r.zrange(keys.priority_queue("default"), 0, -1):
        if json.loads(priority.payload_of(member))["args"] == [token]:
            return keys.priority_queue("default")
    return ""


def expected(p: int) -> str:
    return route.to_queue(build("x", p), time.time()).key


def test_route_sends_priorities_to_the_zset_and_the_rest_to_the_list():
    assert expected(0) == keys.queue("default")
    assert expected(7) == expected(-3) == keys.priority_queue("default")
    plain = route.to_queue(build("x", 0), time.time())
    assert plain.score is None and plain.score_arg == "" and json.loads(plain.value)
    high = route.to_queue(build("x", 7), time.time())
    assert high.score == -7.0 and high.score_arg == "-7.0"
    assert json.loads(priority.payload_of(high.value))["priority"] == 7


@pytest.mark.parametrize("p", PRIORITIES)
def test_every_enqueue_path_agrees(r, p):
    conn = connection.get_client()
    client.push(build(f"push{p}", p))
    client.push_many([build(f"bulk{p}", p), build(f"bulk{p}b", p)])
    client.push(build(f"unique{p}", p, unique="until_executed", unique_digest=f"d{p}"))
    # Due in the schedule and in the retry set: the poller moves them.
    r.zadd(
        keys.schedule(keys.home_of("default")),
        {payload.encode(build(f"sched{p}", p)): time.time() - 1},
    )
    r.zadd(
        keys.retry(keys.home_of("default")),
        {payload.encode(build(f"retry{p}", p)): time.time() - 1},
    )
    assert poller.enqueue_due(conn) == 2
    # The admin's "retry now" (dead) and "retry all" (scheduled, retries).
    r.zadd(keys.dead(keys.home_of("default")), {payload.encode(build(f"dead{p}", p)): time.time()})
    dead = DeadSet()
    (rec,) = dead.page()
    dead.retry(rec)
    r.zadd(
        keys.retry(keys.home_of("default")),
        {payload.encode(build(f"retryall{p}", p)): time.time() + 999},
    )
    r.zadd(
        keys.schedule(keys.home_of("default")),
        {payload.encode(build(f"schedall{p}", p)): time.time() + 999},
    )
    RetrySet().retry_all()
    ScheduledSet().retry_all()
    names = ["push", "bulk", "bulkb", "unique", "sched", "retry", "dead", "retryall", "schedall"]
    tokens = [f"{n}{p}" if n != "bulkb" else f"bulk{p}b" for n in names]
    assert {t: where(r, t) for t in tokens} == dict.fromkeys(tokens, expected(p))
