"""Priorities: strictly higher first within a queue, FIFO within one priority, in
reliable and basic fetch, through the schedule and retries, and with django.tasks in a
real worker. Only the last needs Django 6.0+: the fetch side is the same for every
payload with a "priority", so it is tested on every Django."""

import json
import time

import pytest

from cogworker_django.conf import QueueSpec
from cogworker_django.core import client, payload, priority
from cogworker_django.store import keys, scripts
from cogworker_django.store.connection import get_client
from cogworker_django.worker import fetch, poller

from ..helpers import wait_until

# (token, priority) in enqueue order, and the order they must run in.
ENQUEUED = [
    ("a", 0), ("b", -5), ("c", 10), ("d", 0), ("e", 10),
    ("f", 3), ("g", -5), ("h", 100), ("i", -100), ("j", 3),
]  # fmt: skip
EXPECTED = ["h", "c", "e", "f", "j", "a", "d", "b", "g", "i"]


def push(token, p=0, queue="default", **extra):
    return client.push(
        payload.build("testapp.jobs.noop", [token], queue=queue, priority=p, **extra)
    )


def enqueue_all():
    for token, p in ENQUEUED:
        push(token, p)


def tokens(fetcher, conn):
    found = []
    while (work := fetcher.fetch(conn)) is not None:
        found.append(json.loads(work.raw)["args"][0])
    return found


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_fetch_takes_higher_priorities_first(mode, r):
    enqueue_all()
    assert r.llen(keys.queue("default")) == 2  # priority 0 stays on the list
    assert r.zcard(keys.priority_queue("default")) == 8
    fetcher = fetch.for_mode(mode, "me", (QueueSpec("default", 1),))
    assert tokens(fetcher, get_client()) == EXPECTED
    if mode == "reliable":  # bare payloads, stamps stripped, on the in-progress list
        listed = [
            json.loads(p)["args"][0]
            for p in r.lrange(keys.inprogress("me", keys.home_of("default")), 0, -1)
        ]
        assert sorted(listed) == sorted(EXPECTED)
    assert not r.exists(keys.priority_queue("default"), keys.queue("default"))


def test_paused_queues_and_bad_keys_are_skipped(r):
    push("low-5", 5, queue="low")
    push("default-minus-5", -5)
    fetcher = fetch.ReliableFetch("me", (QueueSpec("low", 1), QueueSpec("default", 1)))
    r.sadd(keys.paused(keys.home_of("default")), "low")
    assert tokens(fetcher, get_client()) == ["default-minus-5"]
    r.srem(keys.paused(keys.home_of("default")), "low")
    assert tokens(fetcher, get_client()) == ["low-5"]
    # A priority key of the wrong type (until the key guard moves it) stops nothing.
    r.set(keys.priority_queue("default"), "oops")
    push("plain")
    assert tokens(fetcher, get_client()) == ["plain"]


def test_the_old_fetch_layout_ignores_priority_sets(r):
    """fetch.lua called without the zset keys (as before priorities) takes only lists."""
    push("p9", 9)
    push("p0")

    got = scripts.run(
        "fetch", get_client(), [keys.inprogress("me", keys.home_of("default")), keys.paused(keys.home_of("default")), keys.queue("default")],
        [0, 0, 1, "", "", "", "default"],  # no acks, no results kept, one job wanted, no kinds
    )  # fmt: skip
    assert json.loads(got[1])["args"] == ["p0"]


def test_due_scheduled_and_retried_tasks_go_back_to_their_priority_set(r):
    later = time.time() + 3600
    push("scheduled-7", 7, at=later)
    push("scheduled-0", at=later)
    retried = payload.build("testapp.jobs.noop", ["retried-2"], priority=2, retry_count=1)
    r.zadd(keys.retry(keys.home_of("default")), {payload.encode(retried): 1})
    assert poller.enqueue_due(get_client(), now=later + 1) == 3
    members = r.zrange(keys.priority_queue("default"), 0, -1, withscores=True)
    assert [(json.loads(priority.payload_of(m))["args"][0], s) for m, s in members] == [
        ("scheduled-7", -7.0),
        ("retried-2", -2.0),
    ]
    assert [json.loads(p)["args"][0] for p in r.lrange(keys.queue("default"), 0, -1)] == [
        "scheduled-0"
    ]


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_a_worker_with_one_thread_runs_them_in_priority_order(mode, inworker, r):
    pytest.importorskip("django.tasks")
    from testapp import tasks as tt

    for token, p in ENQUEUED:  # while no worker runs
        tt.record_order.using(priority=p).enqueue(token)
    inworker(concurrency=1, fetch=mode)
    order_key = tt.test_key("task_order")
    wait_until(lambda: r.llen(order_key) == len(EXPECTED), 15, message="every task")
    assert r.lrange(order_key, 0, -1) == EXPECTED
