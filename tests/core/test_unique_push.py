"""Pushing unique jobs (no worker): the lock and the push are one step, a duplicate
pushes nothing, a failed push leaves no lock, scheduled jobs lock from the push."""

import json
import threading
import time

import pytest
import redis
from django.db import transaction
from testapp import jobs as tj

from cogworker_django.core import locks
from cogworker_django.store import keys

from .unique_helpers import lock_of, queued, stop_keeping_data

# Unique jobs behave the same on a Redis Cluster: every test runs on both
# (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]

UE = tj.record.using(unique="until_executed")
US = tj.record.using(unique="until_started")
WE = tj.record.using(unique="while_executing")


@pytest.mark.parametrize(
    "unique_mode", ["until_executed", "until_started"], ids=["until_executed", "until_started"]
)
def test_duplicate_enqueue_returns_none_and_pushes_nothing(r, unique_mode):
    variant = tj.takes_anything.using(unique=unique_mode)  # positional and keyword arguments
    jid = variant.enqueue("a", token="x")
    assert isinstance(jid, str)
    key = lock_of("a", token="x", func=tj.takes_anything.path)
    assert r.get(key) == jid
    assert 0 < r.ttl(key) <= 86400
    assert variant.enqueue("a", token="x") is None
    assert variant.enqueue("a", **{"token": "x"}) is None
    assert [j["jid"] for j in queued(r)] == [jid]
    assert r.get(key) == jid  # the duplicate did not touch the lock
    # Other arguments are another job.
    assert variant.enqueue("b", token="x") is not None
    assert len(queued(r)) == 2


def test_while_executing_takes_no_lock_at_push(r):
    a, b = WE.enqueue("a"), WE.enqueue("a")
    assert a and b and a != b
    assert len(queued(r)) == 2
    assert not r.exists(lock_of("a"))


def test_accepted_again_once_the_lock_is_released(r):
    jid = UE.enqueue("a")
    assert UE.enqueue("a") is None
    locks.release(lock_of("a"), jid)
    assert not r.exists(lock_of("a"))
    assert UE.enqueue("a") not in (None, jid)


def test_lock_ttl_is_unique_for(r):
    UE.using(unique_for=30).enqueue("a")
    assert 25 <= r.ttl(lock_of("a")) <= 30


def test_enqueue_many_returns_none_in_the_places_of_duplicates(r):
    first = UE.enqueue(1)
    out = UE.enqueue_many([(1,), (2,), (2,), (3,), (1,)])
    assert out[0] is None and out[2] is None and out[4] is None
    assert all(isinstance(j, str) for j in (out[1], out[3]))
    assert [j["jid"] for j in reversed(queued(r))] == [first, out[1], out[3]]
    assert r.get(lock_of(2)) == out[1] and r.get(lock_of(3)) == out[3]


def test_enqueue_many_of_scheduled_and_plain_jobs_in_one_round_trip(r):
    """Non-unique jobs ride in the same pipeline as unique ones."""
    plain = tj.record.enqueue_many([("p1",), ("p2",)])
    uniq = UE.enqueue_many([("u1",), ("u1",)])
    assert all(plain) and uniq[1] is None
    assert len(queued(r)) == 3


def test_a_bulk_of_unique_jobs_pushes_after_the_server_forgot_its_scripts(redis_server, configure):
    # The bulk's scripts go by EVALSHA: refused (NOSCRIPT) after a restart or SCRIPT
    # FLUSH, they are loaded and run in their place (store/scripts.execute).
    server = redis_server()
    configure(REDIS_URL=server.url)
    server.client().script_flush()
    out = UE.enqueue_many([("u1",), ("u1",), ("u2",)]) + tj.record.enqueue_many([("p",)])
    assert out[0] and out[1] is None and out[2] and out[3]
    r = server.client()
    assert sorted(j["jid"] for j in queued(r)) == sorted([out[0], out[2], out[3]])
    assert r.get(lock_of("u1")) == out[0] and r.get(lock_of("u2")) == out[2]


@pytest.mark.parametrize("how", ["enqueue_in", "enqueue_at"])
def test_scheduled_job_locks_from_the_push_for_delay_plus_unique_for(r, how):
    delay = 600
    call = (
        (lambda *a: UE.using(unique_for=60).enqueue_in(delay, *a))
        if how == "enqueue_in"
        else (lambda *a: UE.using(unique_for=60).enqueue_at(time.time() + delay, *a))
    )
    jid = call("a")
    assert jid is not None
    [(raw, score)] = r.zrange(keys.schedule(keys.home_of("default")), 0, -1, withscores=True)
    assert json.loads(raw)["jid"] == jid and score > time.time() + delay - 5
    key = lock_of("a")
    assert r.get(key) == jid
    # The TTL covers the wait and then unique_for, so the lock outlives the delay.
    assert delay + 55 <= r.ttl(key) <= delay + 60
    assert call("a") is None
    assert UE.enqueue("a") is None  # a push for now is a duplicate too
    assert (
        r.zcard(keys.schedule(keys.home_of("default"))) == 1 and r.llen(keys.queue("default")) == 0
    )


def test_failed_push_leaves_no_lock(r):
    """The queue key holds a string: the script's LPUSH fails, the lock is never set."""
    r.set(keys.queue("default"), "not a list")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        UE.enqueue("a")
    assert not r.exists(lock_of("a"))
    r.delete(keys.queue("default"))
    assert UE.enqueue("a") is not None  # nothing wedged


def test_failed_bulk_push_leaves_no_lock(r):
    r.set(keys.queue("default"), "not a list")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        UE.enqueue_many([("a",), ("b",)])
    assert not r.exists(lock_of("a")) and not r.exists(lock_of("b"))


def test_failed_scheduled_push_leaves_no_lock(r):
    r.rpush(keys.schedule(keys.home_of("default")), "not a zset")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        UE.enqueue_in(60, "a")
    assert not r.exists(lock_of("a"))


def test_lock_key_of_another_type_is_an_error_not_a_silent_refusal(r):
    r.hset(lock_of("a"), "x", "1")
    # Named as the key it is, with what it holds and what the key guard will do about it.
    with pytest.raises(
        redis.ResponseError, match=r"WRONGTYPE.*unique:.* holds a hash, not a string"
    ):
        UE.enqueue("a")
    assert r.llen(keys.queue("default")) == 0


def test_lock_without_ttl_gets_one_back(r):
    """Never wedged: a lock that lost its TTL (PERSIST, a hand-made SET) still expires."""
    r.set(lock_of("a"), "someone")
    assert UE.using(unique_for=50).enqueue("a") is None
    assert 0 < r.ttl(lock_of("a")) <= 50
    assert r.get(lock_of("a")) == "someone"


# Owner-checked locks ----------------------------------------------------------------------


def test_lock_writes_are_owner_checked(r):
    key = lock_of("a")
    jid = UE.enqueue("a")
    assert not locks.delete(key, "other-jid")
    assert not locks.expire(key, "other-jid", 5)
    assert not locks.take(key, "other-jid", 5)
    assert not locks.retake(key, "other-jid", 5)
    assert r.get(key) == jid and r.ttl(key) > 5
    assert locks.expire(key, jid, 5) and r.ttl(key) <= 5
    assert locks.delete(key, jid) and not r.exists(key)
    assert locks.retake(key, jid, 5) and r.get(key) == jid


@pytest.mark.parametrize("mode", ["until_executed", "until_started", "while_executing"])
def test_release_job_locks_releases_the_unique_lock_of_its_owner_only(r, mode):
    """What the api's delete/kill and the worker's dead paths call."""
    jid = tj.record.using(unique="until_executed").enqueue("a")
    job = {**queued(r)[0], "unique": mode}
    locks.release_job_locks({**job, "jid": "another-job"})
    assert r.get(lock_of("a")) == jid
    locks.release_job_locks(job)
    assert not r.exists(lock_of("a"))


def test_release_job_locks_ignores_jobs_without_a_lock(r):
    for job in (
        {"jid": "j"},
        {"jid": "j", "unique": "until_executed"},
        {"jid": "j", "unique_digest": "d"},
        {"jid": "j", "unique": "bogus", "unique_digest": "d"},
        {"jid": None, "unique": "until_executed", "unique_digest": "d"},
    ):
        locks.release_job_locks(job)
    assert locks.deferred().pending() == {}


def test_extend_job_locks_is_owner_checked(r):
    jid = UE.using(unique_for=10).enqueue("a")
    job = queued(r)[0]
    locks.extend_job_locks(job, 500)
    assert r.ttl(lock_of("a")) > 400
    locks.extend_job_locks({**job, "jid": "other"}, 5)
    assert r.ttl(lock_of("a")) > 400 and r.get(lock_of("a")) == jid


# Deferred releases -------------------------------------------------------------------------


def test_release_while_redis_is_away_is_deferred_then_retried(redis_server, configure):
    server = redis_server()
    configure(REDIS_URL=server.url)
    c = server.client()
    jid = UE.enqueue("a")
    key = lock_of("a")
    stop_keeping_data(server)
    assert locks.release(key, jid) is False  # never raises
    assert locks.deferred().pending() == {key: jid}
    locks.retry_deferred()  # still away: kept
    assert locks.deferred().pending() == {key: jid}
    server.start()
    c = server.client()
    assert c.get(key) == jid
    locks.retry_deferred()
    assert locks.deferred().pending() == {}
    assert not c.exists(key)


def test_deferred_release_never_deletes_a_newer_owners_lock(r):
    key = lock_of("a")
    r.set(key, "newer-run", ex=60)
    locks.deferred().add(key, "older-run")
    locks.retry_deferred()
    assert r.get(key) == "newer-run" and locks.deferred().pending() == {}


def test_deferred_release_with_a_deterministic_error_is_dropped(r, caplog):
    key = lock_of("a")
    r.hset(key, "x", "1")  # GET on a hash: WRONGTYPE, retrying would never help
    locks.deferred().add(key, "jid")
    locks.retry_deferred()
    assert locks.deferred().pending() == {}
    assert "deferred release of" in caplog.text and "dropped" in caplog.text


def test_concurrent_pushes_of_one_job_take_the_lock_once(r):
    """Many threads enqueue the same job at once: the script is atomic, one wins."""
    results, barrier = [], threading.Barrier(8)

    def push():
        barrier.wait()
        results.extend(UE.enqueue("race") for _ in range(25))

    threads = [threading.Thread(target=push) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [j for j in results if j is not None]
    assert len(results) == 200 and len(winners) == 1
    assert [j["jid"] for j in queued(r)] == winners


@pytest.mark.django_db(transaction=True)
def test_on_commit_returns_the_jid_and_drops_the_duplicate_at_commit(r):
    """With on_commit the push (and so the duplicate check) happens at commit: enqueue
    can't know yet, so it returns the jid; the duplicate is then not pushed."""
    job = UE.using(on_commit=True)
    with transaction.atomic():
        a, b = job.enqueue("c"), job.enqueue("c")
        assert a and b and a != b
        assert r.llen(keys.queue("default")) == 0
    assert [j["jid"] for j in queued(r)] == [a]
    assert r.get(lock_of("c")) == a
