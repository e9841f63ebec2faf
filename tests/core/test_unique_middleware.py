"""UniqueMiddleware called directly (as a processor does) against the real Redis: what
each mode does with its lock around a run."""

import json

import pytest
from testapp import jobs as tj

from cogworker_django.core import locks, unique
from cogworker_django.core.middleware import Reschedule
from cogworker_django.store import keys

from .unique_helpers import lock_of

MW = unique.UniqueMiddleware()


def pushed(r, mode="until_executed", **opts):
    """Enqueue record("a") in ``mode`` and return its payload as a worker would see it."""
    jid = tj.record.using(unique=mode, **opts).enqueue("a")
    job = json.loads(r.lindex(keys.queue("default"), 0))
    assert job["jid"] == jid
    return job


def fail():
    raise ValueError("boom")


def test_until_executed_released_on_success(r):
    job = pushed(r)
    assert MW(job, "default", lambda: "done") == "done"
    assert not r.exists(lock_of("a"))


def test_until_executed_kept_on_a_failure_that_will_be_retried(r):
    job = pushed(r, retry=3)
    with pytest.raises(ValueError):
        MW(job, "default", fail)
    assert r.get(lock_of("a")) == job["jid"]


@pytest.mark.parametrize("retry, retry_count", [(False, 0), (2, 2), (0, 0)])
def test_until_executed_released_on_the_terminal_failure(r, retry, retry_count):
    job = {**pushed(r, retry=retry), "retry_count": retry_count}
    with pytest.raises(ValueError):
        MW(job, "default", fail)
    assert not r.exists(lock_of("a"))


def test_until_executed_rescheduled_by_an_inner_middleware_keeps_and_extends_its_lock(r):
    """A Reschedule is no failure, even for a retry=False job: the job stays in the
    system, so does its lock, for the wait plus unique_for."""
    job = pushed(r, retry=False, unique_for=10)

    def reschedule():
        raise Reschedule(100)

    with pytest.raises(Reschedule):
        MW(job, "default", reschedule)
    assert r.get(lock_of("a")) == job["jid"] and r.ttl(lock_of("a")) > 100


def test_until_executed_never_releases_another_jobs_lock(r):
    job = pushed(r)
    r.set(lock_of("a"), "a-newer-job", ex=60)
    MW(job, "default", lambda: None)
    assert r.get(lock_of("a")) == "a-newer-job"


def test_until_started_released_before_the_run(r):
    job = pushed(r, mode="until_started")
    seen = []
    MW(job, "default", lambda: seen.append(r.get(lock_of("a"))))
    assert seen == [None]


def test_while_executing_holds_the_lock_only_during_the_run(r):
    job = pushed(r, mode="while_executing", unique_for=30)
    seen = []
    MW(job, "default", lambda: seen.append((r.get(lock_of("a")), r.ttl(lock_of("a")))))
    assert seen[0][0] == job["jid"] and 0 < seen[0][1] <= 30
    assert not r.exists(lock_of("a"))
    with pytest.raises(ValueError):
        MW(job, "default", fail)
    assert not r.exists(lock_of("a"))


def test_while_executing_reschedules_when_another_run_holds_the_lock(r, configure):
    configure(UNIQUE_RESCHEDULE_DELAY=7)
    job = pushed(r, mode="while_executing")
    r.set(lock_of("a"), "the-other-run", ex=60)
    ran = []
    with pytest.raises(Reschedule) as info:
        MW(job, "default", lambda: ran.append(1))
    assert info.value.delay == 7 and not ran
    assert r.get(lock_of("a")) == "the-other-run"


def test_while_executing_reschedules_while_redis_is_away(r, configure, redis_server):
    """An outage at the lock is no failure of the job (a retry=False job would be dead)."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    job = {**pushed(server.client(), mode="while_executing"), "retry": False}
    server.stop()
    ran = []
    with pytest.raises(Reschedule, match="Redis unavailable"):
        MW(job, "default", lambda: ran.append(1))
    assert not ran


def test_a_release_that_fails_is_deferred_and_never_fails_the_job(r, configure, redis_server):
    server = redis_server()
    configure(REDIS_URL=server.url)
    c = server.client()
    job = pushed(c)

    def run_then_lose_redis():
        server.stop()
        return "ok"

    assert MW(job, "default", run_then_lose_redis) == "ok"
    assert locks.deferred().pending() == {lock_of("a"): job["jid"]}


def test_jobs_without_a_mode_or_digest_pass_through(r):
    for job in (
        {"jid": "j"},
        {"jid": "j", "unique": "until_executed"},
        {"jid": "j", "unique": "x", "unique_digest": "d"},
    ):
        assert MW(job, "default", lambda: 5) == 5
    assert not list(r.scan_iter(keys.unique("*", keys.home_of("default"))))
