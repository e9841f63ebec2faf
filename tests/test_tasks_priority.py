"""Task priorities: strictly higher first within a queue, FIFO within one priority, in
reliable and basic fetch, through the schedule and retries, and in a real worker."""

import datetime as dt
import json

import pytest

pytest.importorskip("django.tasks")

from testapp import tasks as tt  # noqa: E402

from cogworker_django import keys, priority  # noqa: E402
from cogworker_django.conf import QueueSpec  # noqa: E402
from cogworker_django.connection import get_client  # noqa: E402
from cogworker_django.worker import fetch, poller  # noqa: E402

from .helpers import wait_until  # noqa: E402

# (token, priority) in enqueue order, and the order they must run in.
ENQUEUED = [
    ("a", 0), ("b", -5), ("c", 10), ("d", 0), ("e", 10),
    ("f", 3), ("g", -5), ("h", 100), ("i", -100), ("j", 3),
]  # fmt: skip
EXPECTED = ["h", "c", "e", "f", "j", "a", "d", "b", "g", "i"]


def enqueue_all(queue="default"):
    for token, p in ENQUEUED:
        tt.record_order.using(priority=p, queue_name=queue).enqueue(token)


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
        listed = [json.loads(p)["args"][0] for p in r.lrange(keys.inprogress("me"), 0, -1)]
        assert sorted(listed) == sorted(EXPECTED)
    assert not r.exists(keys.priority_queue("default"), keys.queue("default"))


def test_paused_queues_and_bad_keys_are_skipped(r):
    tt.record_order.using(priority=5, queue_name="low").enqueue("low-5")
    tt.record_order.using(priority=-5).enqueue("default-minus-5")
    fetcher = fetch.ReliableFetch("me", (QueueSpec("low", 1), QueueSpec("default", 1)))
    r.sadd(keys.paused(), "low")
    assert tokens(fetcher, get_client()) == ["default-minus-5"]
    r.srem(keys.paused(), "low")
    assert tokens(fetcher, get_client()) == ["low-5"]
    # A priority key of the wrong type (until the key guard moves it) stops nothing.
    r.set(keys.priority_queue("default"), "oops")
    tt.record_order.enqueue("plain")
    assert tokens(fetcher, get_client()) == ["plain"]


def test_the_old_fetch_layout_ignores_priority_sets(r):
    """fetch.lua called without the zset keys (as before priorities) takes only lists."""
    tt.record_order.using(priority=9).enqueue("p9")
    tt.record_order.enqueue("p0")
    from cogworker_django import scripts

    got = scripts.run(
        "fetch", get_client(), [keys.inprogress("me"), keys.paused(), keys.queue("default")],
        ["", "default"],
    )  # fmt: skip
    assert json.loads(got[1])["args"] == ["p0"]


def test_due_scheduled_and_retried_tasks_go_back_to_their_priority_set(r):
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    tt.record_order.using(priority=7, run_after=later).enqueue("scheduled-7")
    tt.record_order.using(run_after=later).enqueue("scheduled-0")
    retried = json.loads(r.zrange(keys.schedule(), 0, 0)[0])
    retried.update(args=["retried-2"], jid="x", priority=2, retry_count=1)
    r.zadd(keys.retry(), {json.dumps(retried): 1})
    assert poller.enqueue_due(get_client(), now=later.timestamp() + 1) == 3
    members = r.zrange(keys.priority_queue("default"), 0, -1, withscores=True)
    assert [(json.loads(priority.payload_of(m))["args"][0], s) for m, s in members] == [
        ("scheduled-7", -7.0),
        ("retried-2", -2.0),
    ]
    assert [json.loads(p)["args"][0] for p in r.lrange(keys.queue("default"), 0, -1)] == [
        "scheduled-0"
    ]


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_a_worker_with_one_thread_runs_them_in_priority_order(mode, worker, r):
    enqueue_all()
    worker(args=["-c", "1", "--fetch", mode])
    order_key = tt.test_key("task_order")
    wait_until(lambda: r.llen(order_key) == len(EXPECTED), 15, message="every task")
    assert r.lrange(order_key, 0, -1) == EXPECTED
