"""api.ScheduledSet / RetrySet / DeadSet against the real Redis: pages, lookups, search,
and every action (rule 2: added before removed; locks released when a job leaves)."""

import json
import time

import pytest

from cogworker_django.api import DeadSet, Outcome, RetrySet, ScheduledSet
from cogworker_django.api.jobs import requeue_route
from cogworker_django.store import keys

from ..api_support import add_to, make_job, unique_job

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]


def test_pages_are_in_display_order(r):
    now = time.time()
    for i in range(5):
        add_to(r, "schedule", make_job(token=i), now + i)
        add_to(r, "dead", make_job(token=i), now - i)
    sched = ScheduledSet()
    assert sched.size() == 5
    assert [rec.job["token"] for rec in sched.page(0, 3)] == [0, 1, 2]
    assert [rec.job["token"] for rec in sched.page(3, 3)] == [3, 4]
    # Dead: most recent first.
    assert [rec.job["token"] for rec in DeadSet().page(0, 5)] == [0, 1, 2, 3, 4]
    assert list(DeadSet().iter_records(batch=2))[-1].job["token"] == 4


def test_get_by_entry_key_and_find_by_jid(r):
    jobs = [make_job("x", i) for i in range(3)]
    score = time.time()
    for j in jobs:
        add_to(r, "retry", j, score)  # same score: the digest tells them apart
    rs = RetrySet()
    listed = rs.page(0, 10)
    assert len(listed) == 3 and len({rec.key for rec in listed}) == 3
    for rec in listed:
        assert rs.get(rec.key).raw == rec.raw
    assert rs.get("garbage") is None
    assert rs.get(f"{score!r}|0000") is None
    assert rs.find(jobs[1]["jid"]).job["args"] == [1]
    assert rs.find("nope") is None


def test_search_matches_name_jid_queue_and_error_any_case(r):
    add_to(r, "dead", make_job("app.mail.Send", queue="mail", error_message='Bad "quote" <b>'))
    other = make_job("app.other", queue="low", error_message="fine")
    add_to(r, "dead", other)
    dead = DeadSet()
    assert [x.func for x in dead.search("mail.send").records] == ["app.mail.Send"]
    assert [x.func for x in dead.search('"quote" <B>').records] == ["app.mail.Send"]
    assert [x.func for x in dead.search(other["jid"]).records] == ["app.other"]
    assert len(dead.search("app.").records) == 2
    assert dead.search("*").records == []  # glob characters are literal
    page = dead.search("app.")
    # One ZSCAN per set: with a home per queue, one per home (default, mail, low and the
    # prefix's own).
    assert page.complete and page.calls == (4 if keys.spread() else 1)


def test_retry_now_moves_to_queue_keeping_retry_count(r):
    job = make_job("testapp.jobs.record", "t", queue="low", retry_count=3, at=123)
    raw = add_to(r, "dead", job)
    dead = DeadSet()
    rec = dead.page()[0]
    before = time.time()
    assert dead.retry(rec) == Outcome.DONE
    assert dead.size() == 0
    moved = json.loads(r.lindex(keys.queue("low"), 0))
    assert moved["retry_count"] == 3 and "at" not in moved
    assert moved["enqueued_at"] >= before
    assert r.sismember(keys.queues(), "low")
    # A second click finds it gone and does not push it twice.
    assert dead.retry(rec) == Outcome.GONE
    assert r.llen(keys.queue("low")) == 1
    assert raw != r.lindex(keys.queue("low"), 0)


def test_scheduled_enqueue_now(r):
    add_to(r, "schedule", make_job(queue="default"), time.time() + 3600)
    s = ScheduledSet()
    assert s.retry(s.page()[0]) == Outcome.DONE
    assert r.llen(keys.queue("default")) == 1 and s.size() == 0


def test_undecodable_entries_show_and_stay_on_retry(r):
    r.zadd(keys.dead(keys.home_of("default")), {b"\xff not json <script>": time.time()})
    dead = DeadSet()
    rec = dead.page()[0]
    assert rec.unparseable
    assert "<script>" in rec.raw_payload
    assert dead.retry(rec) == Outcome.INVALID
    assert dead.size() == 1
    assert dead.get(rec.key).raw == rec.raw  # the handle is stable though the jid is not
    assert requeue_route({"func": "x", "jid": "j", "queue": ""}) is None
    assert dead.delete(rec) == Outcome.DONE and dead.size() == 0


def test_delete_releases_locks(r):
    job = unique_job(r)
    add_to(r, "schedule", job, time.time() + 60)
    s = ScheduledSet()
    assert s.delete(s.page()[0]) == Outcome.DONE
    assert not r.exists(keys.unique(job["unique_digest"], keys.home_of("default")))


def test_delete_does_not_release_a_lock_someone_else_owns(r):
    job = unique_job(r)
    add_to(r, "retry", job)
    r.set(
        keys.unique(job["unique_digest"], keys.home_of("default")), "newer-jid"
    )  # a newer job took the lock
    rs = RetrySet()
    rs.delete(rs.page()[0])
    assert r.get(keys.unique(job["unique_digest"], keys.home_of("default"))) == "newer-jid"


def test_kill_moves_retry_to_dead_and_releases_locks(r, configure):
    job = unique_job(r)
    add_to(r, "retry", job, time.time() + 60)
    rs = RetrySet()
    rec = rs.page()[0]
    assert rs.kill(rec) == Outcome.DONE
    assert rs.size() == 0 and DeadSet().size() == 1
    assert DeadSet().page()[0].raw == rec.raw
    assert not r.exists(keys.unique(job["unique_digest"], keys.home_of("default")))
    assert rs.kill(rec) == Outcome.GONE


def test_kill_trims_dead_to_its_cap(r, configure):
    configure(DEAD_MAX_JOBS=2)
    for i in range(3):
        add_to(r, "dead", make_job(token=i), time.time() - 10 + i)
    add_to(r, "retry", make_job(token="killed"))
    rs = RetrySet()
    rs.kill(rs.page()[0])
    assert [x.job["token"] for x in DeadSet().page()] == ["killed", 2]


def test_retry_all_in_batches_leaves_invalid_entries(r):
    now = time.time()
    for i in range(7):
        add_to(r, "dead", make_job(token=i, queue="q1" if i % 2 else "q2"), now - i)
    r.zadd(keys.dead(keys.home_of("default")), {b"garbage": now - 100, b"{}": now - 3.5})
    result = DeadSet().retry_all(batch=3)
    assert (result.done, result.invalid, result.gone) == (7, 2, 0)
    assert r.llen(keys.queue("q1")) + r.llen(keys.queue("q2")) == 7
    assert DeadSet().size() == 2


def test_bulk_actions_stop_at_their_score_bound(r):
    # By default the bound is the highest score when the call starts, so jobs that die
    # while a long "retry all" runs are not swept up with it.
    now = time.time()
    for i in range(4):
        add_to(r, "dead", make_job(token=i), now - i)
    add_to(r, "dead", make_job(token="later"), now + 1000)
    assert DeadSet().retry_all(batch=2, until=now).done == 4
    assert [x.job["token"] for x in DeadSet().page()] == ["later"]
    add_to(r, "dead", make_job(token="earlier"), now - 50)
    assert DeadSet().delete_all(batch=1, until=now).done == 1
    assert [x.job["token"] for x in DeadSet().page()] == ["later"]
    assert DeadSet().retry_all().done == 1


def test_delete_all_releases_locks_in_batches(r):
    jobs = [unique_job(r, "x", i) for i in range(5)]
    for j in jobs:
        add_to(r, "dead", j)
    add_to(r, "dead", make_job())
    result = DeadSet().delete_all(batch=2)
    assert result.done == 6 and DeadSet().size() == 0
    assert not any(r.exists(keys.unique(j["unique_digest"], keys.home_of("default"))) for j in jobs)
    assert DeadSet().delete_all().done == 0


def test_actions_retry_deferred_lock_releases_first(r):
    from cogworker_django.core import locks

    r.set(keys.unique("deferred", keys.home_of("default")), "owner")
    locks.deferred().add(keys.unique("deferred", keys.home_of("default")), "owner")
    add_to(r, "dead", make_job())
    DeadSet().delete(DeadSet().page()[0])
    assert not r.exists(keys.unique("deferred", keys.home_of("default")))
    assert locks.deferred().pending() == {}


def test_works_with_a_decoding_client(r, configure):
    # REDIS_OPTIONS={"decode_responses": True} makes every reply a str.
    from cogworker_django.api import Queue

    configure(REDIS_OPTIONS={"decode_responses": True})
    job = make_job(queue="low")
    add_to(r, "dead", job)
    r.lpush(keys.queue("low"), json.dumps(make_job(queue="low", token="q")))
    dead = DeadSet()
    rec = dead.find(job["jid"])
    assert dead.get(rec.key).jid == job["jid"]
    assert dead.search(job["jid"]).records[0].jid == job["jid"]
    assert dead.retry(rec) == Outcome.DONE
    q = Queue("low")
    found = q.find(job["jid"])
    assert found is not None and q.size() == 2 and q.latency() is not None
    assert q.clear() == 2
