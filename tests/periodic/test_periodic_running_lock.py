"""The until_executed running lock: RunningLockMiddleware (the run's side) and the
heartbeat hook that keeps it alive, in this process against real Redis servers."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis
from testapp import jobs as tj  # noqa: F401 - registers the jobs the entries name

from cogworker_django.conf import QueueSpec
from cogworker_django.core import locks, payload
from cogworker_django.core.middleware import Reschedule
from cogworker_django.periodic import entries, running_lock
from cogworker_django.periodic.running_lock import LockRefresher, RunningLockMiddleware
from cogworker_django.store import connection, keys
from cogworker_django.worker.fetch import ReliableFetch, Work
from cogworker_django.worker.manager import Manager

T0 = 1_800_000_000
DURABLE = ["--appendonly", "yes", "--appendfsync", "always"]


def claimed_run(r, name="e", job="testapp.jobs.periodic_span", queued_ttl=86400):
    """A run's payload with its lock taken, as the claim script leaves them."""
    entry = entries.parse_entry(name, {"cron": "* * * * *", "job": job, "unique": "until_executed"})
    run = entry.build_job(slot=T0)
    r.set(keys.periodic_running(name), run["jid"], ex=queued_ttl)
    return run


def call(job, run=lambda: "done"):
    return RunningLockMiddleware()(job, "default", run)


@pytest.fixture
def short_active(configure):
    configure(PERIODIC_ACTIVE_TTL=7)


def test_the_lock_is_shortened_at_start_and_released_on_success(r, short_active):
    job = claimed_run(r)
    lock = keys.periodic_running("e")
    seen = {}

    def run():
        seen["holder"], seen["ttl"] = r.get(lock), r.ttl(lock)
        return "done"

    assert call(job, run) == "done"
    assert seen == {"holder": job["jid"], "ttl": 7}
    assert not r.exists(lock)


def test_a_retried_failure_keeps_the_lock_and_the_last_one_releases_it(r):
    job = claimed_run(r, job="testapp.jobs.periodic_tick")  # retry=True: 25 attempts
    lock = keys.periodic_running("e")

    def boom():
        raise ValueError("boom")

    with pytest.raises(ValueError):
        call(job, boom)
    assert r.get(lock) == job["jid"]  # the processor extends it to cover the backoff
    job["retry_count"] = payload.DEFAULT_MAX_RETRIES  # this attempt is the last one
    with pytest.raises(ValueError):
        call(job, boom)
    assert not r.exists(lock)


def test_a_job_without_retries_releases_on_its_failure(r):
    job = claimed_run(r)  # periodic_span: retry=False

    def boom():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        call(job, boom)
    assert not r.exists(keys.periodic_running("e"))


def test_a_run_never_overlaps_another_run_holding_the_lock(r):
    job = claimed_run(r)
    r.set(keys.periodic_running("e"), "newer-run")
    ran = []
    with pytest.raises(Reschedule):
        call(job, lambda: ran.append(1))
    assert ran == []
    assert r.get(keys.periodic_running("e")) == "newer-run"


def test_a_run_whose_lock_lapsed_takes_it_back(r, short_active):
    job = claimed_run(r)
    lock = keys.periodic_running("e")
    r.delete(lock)  # e.g. recovered from a dead worker after the active TTL
    seen = []
    call(job, lambda: seen.append((r.get(lock), r.ttl(lock))))
    assert seen == [(job["jid"], 7)]
    assert not r.exists(lock)


def test_a_rescheduled_run_keeps_its_lock_for_the_delay(r, short_active):
    job = claimed_run(r)

    def later():
        raise Reschedule(120)

    with pytest.raises(Reschedule):
        call(job, later)
    lock = keys.periodic_running("e")
    assert r.get(lock) == job["jid"]
    assert r.ttl(lock) > 86400


def test_other_jobs_pass_through_untouched(r):
    job = payload.build("testapp.jobs.periodic_tick", periodic="e")  # not until_executed
    r.set(keys.periodic_running("e"), "someone")
    assert call(job) == "done"
    assert r.get(keys.periodic_running("e")) == "someone"


def test_a_release_while_redis_is_away_is_deferred_then_done(redis_server, configure):
    server = redis_server(extra=DURABLE)
    configure(REDIS_URL=server.url)
    c = server.client()
    job = claimed_run(c)

    assert call(job, server.stop) is None  # the run ends while Redis is away: no failure
    lock = keys.periodic_running("e")
    assert locks.deferred().pending() == {lock: job["jid"]}
    server.start()
    assert c.get(lock) == job["jid"]
    locks.retry_deferred()
    assert not c.exists(lock)
    assert locks.deferred().pending() == {}


# The heartbeat hook ---------------------------------------------------------------------


def beat_of(*jobs):
    """A real worker pool's ledger (no thread started) with ``jobs`` performing (their
    works, in order), and the refresher the Periodic plugin calls on each beat with it."""
    fetcher = ReliableFetch("me", (QueueSpec("default", 1),))
    ledger = Manager("me", fetcher, 1).ledger
    works = [Work("default", payload.encode(job)) for job in jobs]
    for work in works:
        ledger.start(work, "processor-0")
    return LockRefresher(ledger), ledger, works


def test_the_heartbeat_refreshes_only_performing_runs(r, short_active):
    mine = claimed_run(r, "mine")
    done = claimed_run(r, "done")
    other = claimed_run(r, "other")
    r.set(keys.periodic_running("other"), "another-run", ex=100)
    refresh, ledger, works = beat_of(mine, done, other)
    ledger.performed(works[1])  # past perform: not refreshed
    refresh(r, False)
    assert r.ttl(keys.periodic_running("mine")) == 7
    assert r.ttl(keys.periodic_running("done")) > 86000
    assert r.get(keys.periodic_running("other")) == "another-run"
    assert 90 < r.ttl(keys.periodic_running("other")) <= 100


def test_a_released_lock_stays_released_unless_recovering(r, short_active):
    job = claimed_run(r)
    lock = keys.periodic_running("e")
    r.delete(lock)
    hook, _, _ = beat_of(job)
    hook(r, False)
    assert not r.exists(lock)
    hook(r, True)  # first beat after a failed one: it may have lapsed
    assert r.get(lock) == job["jid"] and r.ttl(lock) == 7
    r.set(lock, "another-run")
    hook(r, True)
    assert r.get(lock) == "another-run"


def test_one_bad_lock_key_does_not_stop_the_others(r, short_active, caplog):
    bad, good = claimed_run(r, "bad"), claimed_run(r, "good")
    r.delete(keys.periodic_running("bad"))
    r.rpush(keys.periodic_running("bad"), "wrong type")
    refresh, _, _ = beat_of(bad, good)
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        refresh(r, False)
    assert "not refreshed" in caplog.text and "WRONGTYPE" in caplog.text
    assert r.ttl(keys.periodic_running("good")) == 7


def test_an_outage_during_the_refresh_retakes_on_the_next_beat(redis_server, configure):
    server = redis_server()
    configure(REDIS_URL=server.url, PERIODIC_ACTIVE_TTL=7)
    c = server.client()
    job = claimed_run(c)
    hook, _, _ = beat_of(job)
    server.stop()
    with pytest.raises(redis.ConnectionError):
        hook(connection.get_client(), False)
    server.start()  # empty: the lock is gone while the run goes on
    c = server.client()
    hook(connection.get_client(), False)  # re-taken, though not "recovering"
    assert c.get(keys.periodic_running("e")) == job["jid"]
    assert c.ttl(keys.periodic_running("e")) == 7


def test_ttls_are_whole_seconds(configure):
    configure(UNIQUE_LOCK_TTL=100, PERIODIC_ACTIVE_TTL=2.5)
    assert running_lock.queued_ttl() == 100
    assert running_lock.active_ttl() == 3


def test_every_worker_refreshes_running_locks_on_its_beats():
    """The Periodic plugin is in every worker's list, and its beat refreshes the locks
    of the record it was started with."""
    from cogworker_django.worker import plugins

    (periodic,) = [p for p in plugins.builtin() if isinstance(p, plugins.Periodic)]
    assert type(periodic).beat is not plugins.Plugin.beat


def test_locks_module_knows_the_running_lock_of_a_run(r):
    """What the processor (retry extension) and the dead paths (release) go through."""
    job = claimed_run(r)
    lock = keys.periodic_running("e")
    assert locks.job_locks(job) == [lock]
    locks.extend_job_locks(job, 500_000)
    assert r.ttl(lock) > 86400
    r.set(lock, "newer-run")
    locks.release_job_locks(job)  # owner-checked: not this run's any more
    assert r.get(lock) == "newer-run"
    r.set(lock, job["jid"])
    locks.release_job_locks(job)
    assert not r.exists(lock)
    plain = entries.parse_entry("p", {"cron": "* * * * *", "job": "testapp.jobs.periodic_tick"})
    assert locks.job_locks(plain.build_job(slot=T0)) == []


def test_a_retried_run_keeps_its_running_lock_for_the_backoff_plus_the_queued_ttl(r):
    """A periodic run has no unique_for: on a retried failure its running lock lives for
    the wait until the retry plus the queued TTL (UNIQUE_LOCK_TTL), so no new slot fires
    while the retry waits."""
    job = claimed_run(r)
    lock = keys.periodic_running("e")
    r.expire(lock, 5)
    locks.extend_job_locks(job, 100)
    assert 86400 + 90 < r.ttl(lock) <= 86400 + 100


def test_a_refresh_in_flight_holds_the_end_of_perform_so_it_never_undoes_an_extension(r):
    """A retried failure extends the running lock right after its run stops performing;
    a heartbeat refresh that had already chosen the run must land before that, never
    after (it would cut the lock back to the active TTL and the next slot would fire
    while the retry waits)."""
    job = claimed_run(r)
    lock = keys.periodic_running("e")
    refresher, ledger, (work,) = beat_of(job)
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow_refresh():  # a beat's refresh of this run, slowed down by the test
        with ledger.while_performing(work.raw) as still:
            entered.set()
            release.wait(5)
            if still:
                refresher._refresh((lock, job["jid"]), 7, False, r)
                order.append("refresh")

    t = threading.Thread(target=slow_refresh)
    t.start()
    assert entered.wait(5)

    def end_of_run():
        ledger.performed(work)  # waits for the refresh in flight
        locks.extend_job_locks(job, 100)  # the retried failure's extension
        order.append("extension")

    u = threading.Thread(target=end_of_run)
    u.start()
    time.sleep(0.3)
    assert order == []  # the run's end waits for the refresh
    release.set()
    t.join(5)
    u.join(5)
    assert order == ["refresh", "extension"]
    assert r.ttl(lock) > 86400  # the extension stands
