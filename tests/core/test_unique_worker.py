"""Each unique mode with a real worker: the duplicate is refused (or rescheduled) while it
should be, and accepted after."""

import json
import time

import pytest
from testapp import jobs as tj

from cogworker_django.store import keys

from ..helpers import wait_until
from .unique_helpers import lock_of

# Unique jobs behave the same on a Redis Cluster: every test runs on both
# (tests/cluster_support.py).
pytestmark = pytest.mark.cluster


def stamps(r, prefix):
    return r.hgetall(f"{prefix}:test:timeline")


def runs(r, prefix, token):
    return int(r.hget(f"{prefix}:test:runs", token) or 0)


def started(r, prefix, jid):
    return r.hexists(f"{prefix}:test:timeline", f"{jid}:start")


def test_until_executed_refuses_duplicates_until_the_run_succeeds(inworker, r, prefix):
    job = tj.timed.using(unique="until_executed")
    key = lock_of(1.0, "ue", func=tj.timed.path)
    jid = job.enqueue(1.0, "ue")
    assert job.enqueue(1.0, "ue") is None  # while queued
    inworker()
    wait_until(lambda: started(r, prefix, jid), message="the run to start")
    assert job.enqueue(1.0, "ue") is None  # while running
    assert r.get(key) == jid
    wait_until(lambda: not r.exists(key), message="the lock to be released")
    # Released only once the run is over (the job stamps its end before returning).
    assert r.hexists(f"{prefix}:test:timeline", f"{jid}:end")
    jid2 = job.enqueue(1.0, "ue")
    assert jid2 not in (None, jid)
    # The second push holds the lock in its turn (what is released below is its own),
    # and refuses a third until its run is over.
    assert r.get(key) == jid2
    assert job.enqueue(1.0, "ue") is None
    wait_until(lambda: runs(r, prefix, "ue") == 2, message="the second run")
    wait_until(lambda: not r.exists(key), message="the second lock to be released")
    assert r.hexists(f"{prefix}:test:timeline", f"{jid2}:end")
    assert runs(r, prefix, "ue") == 2


def test_until_executed_scheduled_job_holds_its_lock_until_it_has_run(inworker, r, prefix):
    job = tj.timed.using(unique="until_executed", unique_for=30)
    key = lock_of(0.1, "sch", func=tj.timed.path)
    jid = job.enqueue_in(1.0, 0.1, "sch")
    assert r.get(key) == jid and r.ttl(key) > 30  # the delay plus unique_for
    inworker()
    assert job.enqueue(0.1, "sch") is None  # due in a moment, still a duplicate
    wait_until(lambda: runs(r, prefix, "sch") == 1, message="the scheduled run")
    wait_until(lambda: not r.exists(key), message="the lock to be released")
    assert job.enqueue(0.1, "sch") is not None


def test_until_started_is_released_when_a_processor_takes_the_job(inworker, r, prefix):
    job = tj.timed.using(unique="until_started")
    key = lock_of(3.0, "us", func=tj.timed.path)
    jid = job.enqueue(3.0, "us")
    assert job.enqueue(3.0, "us") is None  # while queued
    assert r.get(key) == jid
    inworker(concurrency=2)
    wait_until(lambda: started(r, prefix, jid), message="the run to start")
    assert not r.exists(key)  # released before the job function was called
    # The queue paused, the next one waits queued (holding its lock) however slow the
    # machine: no race with a processor taking it.
    r.sadd(keys.paused(keys.home_of("default")), "default")
    jid2 = job.enqueue(3.0, "us")  # accepted while the first still runs
    accepted_at = time.time()
    assert jid2 is not None
    assert job.enqueue(3.0, "us") is None  # the new one is queued
    r.srem(keys.paused(keys.home_of("default")), "default")
    wait_until(lambda: runs(r, prefix, "us") == 2, 20, message="both runs")
    s = stamps(r, prefix)
    assert float(s[f"{jid}:end"]) > accepted_at  # the first was still running then
    # The two runs overlapped: until_started never keeps a second run waiting.
    assert float(s[f"{jid2}:start"]) < float(s[f"{jid}:end"])


def test_while_executing_reschedules_the_second_run_until_the_first_is_done(inworker, r, prefix):
    job = tj.timed.using(unique="while_executing")
    key = lock_of(1.5, "we", func=tj.timed.path)
    a, b = job.enqueue(1.5, "we"), job.enqueue(1.5, "we")
    assert a and b  # no lock at push: both queued
    inworker(settings={"UNIQUE_RESCHEDULE_DELAY": 0.3})

    seen = {}

    def rescheduled():
        now = time.time()
        for raw, score in r.zrange(keys.schedule(keys.home_of("default")), 0, -1, withscores=True):
            j = json.loads(raw)
            if score > now:
                seen.update(jid=j["jid"], score=score, job=j)
                return True
        return False

    wait_until(rescheduled, message="the second run to land in the schedule")
    first = a if seen["jid"] == b else b
    assert seen["jid"] in (a, b)
    assert r.get(key) == first  # the running one holds the lock
    # Rescheduled, not failed: no retry counted, no error recorded.
    assert seen["job"]["retry_count"] == 0 and "error_class" not in seen["job"]
    wait_until(lambda: runs(r, prefix, "we") == 2, message="both runs")
    s = stamps(r, prefix)
    assert float(s[f"{seen['jid']}:start"]) >= float(s[f"{first}:end"])  # never alongside
    wait_until(lambda: not r.exists(key), message="the lock to be released")
    assert (
        r.zcard(keys.retry(keys.home_of("default"))) == 0
        and r.zcard(keys.dead(keys.home_of("default"))) == 0
    )
