"""api.Queue against the real Redis: listing, size, latency, pause/resume, run-order
pages, find, and clear (in batches, releasing the locks of the jobs it removes)."""

import time

import pytest

from cogworker_django.api import Queue
from cogworker_django.store import keys

from ..api_support import make_job, push, unique_job

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]


def test_overview_lists_known_and_paused_queues(r):
    old = make_job(queue="default")
    old["enqueued_at"] = time.time() - 30
    push(r, old)
    push(r, make_job(queue="default"))
    r.sadd(keys.paused(keys.home_of("default")), "frozen")
    infos = {q.name: q for q in Queue.overview()}
    assert set(infos) == {"default", "frozen"}
    assert infos["default"].size == 2 and not infos["default"].paused
    assert 29 < infos["default"].latency < 60
    assert infos["frozen"].paused and infos["frozen"].size == 0
    assert infos["frozen"].latency is None
    assert [q.name for q in Queue.all()] == ["default", "frozen"]


def test_latency_of_an_undecodable_oldest_job_is_unknown(r):
    r.lpush(keys.queue("default"), b"\xff\xfe")
    r.sadd(keys.queues(), "default")
    q = Queue("default")
    assert q.size() == 1 and q.latency() is None
    assert q.jobs()[0].unparseable


def test_wrong_type_queue_key_shows_empty(r):
    r.set(keys.queue("odd"), "x")
    r.sadd(keys.queues(), "odd")
    assert Queue.overview()[0].size == 0


def test_jobs_in_run_order_and_find(r):
    jobs = [make_job(token=i) for i in range(5)]
    for j in jobs:
        push(r, j)
    q = Queue("default")
    assert [x.job["token"] for x in q.jobs(0, 2)] == [0, 1]
    assert [x.job["token"] for x in q.jobs(2, 10)] == [2, 3, 4]
    assert q.jobs(10, 5) == []
    assert q.find(jobs[3]["jid"]).job["token"] == 3
    assert q.find("missing") is None


def test_pause_and_resume(r):
    q = Queue("default")
    q.pause()
    assert q.paused() and q.info().paused
    q.resume()
    assert not q.paused()


def test_clear_removes_jobs_in_batches_and_releases_locks(r):
    locked = [unique_job(r, "x", i) for i in range(3)]
    for j in locked:
        push(r, j)
    for i in range(4):
        push(r, make_job(token=i))
    assert Queue("default").clear(batch=2) == 7
    assert r.llen(keys.queue("default")) == 0
    assert not any(
        r.exists(keys.unique(j["unique_digest"], keys.home_of("default"))) for j in locked
    )
    assert "default" not in r.smembers(keys.queues())


def test_clear_keeps_a_paused_queue_listed(r):
    push(r, make_job(queue="low"))
    r.sadd(keys.paused(keys.home_of("default")), "low")
    assert Queue("low").clear() == 1
    assert "low" in [q.name for q in Queue.all()]


def test_size_and_clear_count_prioritised_tasks(r):
    """django.tasks with a priority wait in P:pqueue:<q> beside the list: the queue's
    size includes them and clearing the queue removes them."""
    from cogworker_django.api import Queue
    from cogworker_django.core import client, payload
    from cogworker_django.store import keys

    client.push(payload.build("testapp.jobs.record", ("plain",), {}, queue="prio"))
    client.push(payload.build("testapp.jobs.record", ("high",), {}, queue="prio", priority=5))
    assert r.zcard(keys.priority_queue("prio")) == 1
    queue = Queue("prio")
    assert queue.size() == 2 and queue.info().size == 2
    assert [q.size for q in Queue.overview() if q.name == "prio"] == [2]
    assert queue.clear() == 2
    assert queue.size() == 0 and not r.exists(keys.priority_queue("prio"))
