"""Jobs that leave the system through the operator api (what the admin's buttons call)
release their unique locks: delete from the schedule or retry set, kill to dead, clear a
queue."""

import json
import time

from testapp import jobs as tj

from cogworker_django import api
from cogworker_django.core import payload
from cogworker_django.store import keys

from .unique_helpers import lock_of

UE = tj.record.using(unique="until_executed")


def test_deleting_a_scheduled_job_releases_its_lock(r):
    jid = UE.enqueue_in(600, "a")
    assert r.get(lock_of("a")) == jid
    s = api.ScheduledSet()
    assert s.delete(s.find(jid)) == api.Outcome.DONE
    assert not r.exists(lock_of("a"))
    assert UE.enqueue("a") is not None


def _in_retry(r, *args):
    """An until_executed job waiting in the retry set, holding its lock."""
    jid = UE.enqueue(*args)
    raw = r.rpop(keys.queue("default"))
    job = {**json.loads(raw), "retry_count": 1, "error_class": "ValueError"}
    r.zadd(keys.retry(keys.home_of("default")), {payload.encode(job): time.time() + 600})
    return jid


def test_deleting_a_job_waiting_for_its_retry_releases_its_lock(r):
    jid = _in_retry(r, "a")
    s = api.RetrySet()
    assert s.delete(s.find(jid)) == api.Outcome.DONE
    assert not r.exists(lock_of("a"))


def test_killing_a_job_waiting_for_its_retry_releases_its_lock(r):
    jid = _in_retry(r, "a")
    s = api.RetrySet()
    assert s.kill(s.find(jid)) == api.Outcome.DONE
    assert r.zcard(keys.dead(keys.home_of("default"))) == 1
    assert not r.exists(lock_of("a"))


def test_clearing_a_queue_releases_the_locks_of_its_unique_jobs(r):
    UE.enqueue_many([("a",), ("b",)])
    tj.record.enqueue("plain")
    other = r.set(lock_of("c"), "someone-else", ex=60) and lock_of("c")
    assert api.Queue("default").clear() == 3
    assert not r.exists(lock_of("a")) and not r.exists(lock_of("b"))
    assert r.get(other) == "someone-else"
