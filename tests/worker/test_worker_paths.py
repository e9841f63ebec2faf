"""Paths that a worker takes rarely, each injected for real: basic fetch's shutdown
requeue, lock releases an outage deferred (retried at stop and on every tick), a claim
rollback failing deterministically and backing off, the running-lock middleware when
Redis can't answer at the start of a run, and pruning of the live-queue listing."""

from __future__ import annotations

import json
import logging
import time

import pytest
from testapp import jobs as tj

from cogworker_django.core import locks, payload
from cogworker_django.periodic import entries
from cogworker_django.periodic.running_lock import RunningLockMiddleware
from cogworker_django.periodic.ticker import BACKOFF_FIRST, Ticker
from cogworker_django.store import keys

from ..helpers import wait_until

DURABLE = ["--appendonly", "yes", "--appendfsync", "always"]
T0 = 1_800_000_000


def runs(r) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{keys.prefix()}:test:runs").items()}


def test_basic_fetch_requeues_an_unfinished_job_at_shutdown(inworker, worker_log, r, prefix):
    w = inworker(fetch="basic", shutdown_timeout=0.5)
    cut = f"cut-{prefix}"  # held at its gate past the stop (testapp/jobs.py)
    tj.gate(cut)
    jid = tj.wait_at_gate.enqueue(cut)
    assert tj.entered[cut].wait(10), "the run never started"
    w.stop()  # as on TERM
    (raw,) = r.lrange(keys.queue("default"), 0, -1)
    assert json.loads(raw)["jid"] == jid
    assert "requeued 1 job(s) unfinished at shutdown" in worker_log.log()
    assert runs(r) == {}
    # The abandoned run ends now, inside this test.
    tj.gates.pop(cut).set()
    for p in w.manager.processors:
        if p.thread is not None:
            p.thread.join(10)
    tj.entered.pop(cut)


def test_a_release_deferred_by_an_outage_goes_through_at_stop(redis_server, inworker, worker_log):
    """The beat would retry it too: beats are a minute apart here, so only the stop can."""
    server = redis_server(extra=DURABLE)
    c = server.client()
    w = inworker(
        settings={"REDIS_URL": server.url, "HEARTBEAT_INTERVAL": 60, "ORPHAN_THRESHOLD": 600}
    )
    job = payload.build("testapp.jobs.sleeper", [1.5], queue="default")
    job.update(unique="while_executing", unique_digest="held")
    c.lpush(keys.queue("default"), payload.encode(job))
    lock = keys.unique("held", keys.home_of("default"))
    wait_until(lambda: c.get(lock) == job["jid"], 10, message="the run's lock")
    port = server.port
    server.stop()  # the run ends while Redis is away: its release is deferred
    worker_log.wait_for_log(r"release of \S+ deferred", 15)
    server.start()
    assert server.port == port
    c = server.client()
    assert c.get(lock) == job["jid"]  # still held: no beat has run since
    w.stop()  # as on TERM
    assert c.get(lock) is None


def test_a_deferred_release_is_retried_before_each_tick(r):
    r.set("held-by-me", "jid-1", ex=600)
    locks.deferred().add("held-by-me", "jid-1")
    e = entries.parse_entry("e", {"cron": "* * * * *", "job": "testapp.jobs.periodic_tick"})
    Ticker([e], started_at=T0).tick(now=T0 + 0.5)
    assert not r.exists("held-by-me")
    assert locks.deferred().pending() == {}


class RefusePeriodicPush:
    """A client middleware refusing the push of periodic runs while ``refusing``."""

    refusing = True

    def __call__(self, job, push):
        if job.get("periodic") and RefusePeriodicPush.refusing:
            raise ValueError("push refused by a middleware")
        return push(job)


def test_a_rollback_that_fails_deterministically_backs_off_then_goes_through(
    redis_server, configure, caplog, monkeypatch
):
    # The ticker's Redis user may not DEL: the claim (GET/SET) works, its rollback (which
    # deletes the slot's lock) is refused with NOPERM, a deterministic error.
    server = redis_server()
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "ticker", "on", ">pw", "~*", "&*", "+@all", "-del")
    monkeypatch.setattr(tj, "RefusePeriodicPush", RefusePeriodicPush, raising=False)
    RefusePeriodicPush.refusing = True
    configure(
        REDIS_URL=f"redis://ticker:pw@127.0.0.1:{server.port}/0",
        MIDDLEWARE={"client": ["testapp.jobs.RefusePeriodicPush"], "server": []},
    )
    e = entries.parse_entry("e", {"cron": "* * * * *", "job": "testapp.jobs.periodic_tick"})
    t = Ticker([e], started_at=T0)
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        t.tick(now=T0 + 0.5)
    assert "not rolled back yet" in caplog.text and "can't run this command" in caplog.text
    assert admin.get(keys.periodic_last_slot("e")) == str(T0)  # claimed, not yet undone
    # The next tick retries it first; failing again deterministically, it backs off.
    t.tick(now=T0 + 1)
    assert t.backoff_remaining("rollback:e") == pytest.approx(BACKOFF_FIRST, abs=0.5)
    # Backing off: the next tick neither retries the rollback nor looks at the entry.
    caplog.clear()
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        t.tick(now=T0 + 1.5)
    assert "not rolled back yet" not in caplog.text
    assert admin.get(keys.periodic_last_slot("e")) == str(T0)
    # Repaired: once the backoff is over the rollback goes through, and the slot is
    # claimed and pushed again.
    admin.execute_command("ACL", "SETUSER", "ticker", "+del")
    RefusePeriodicPush.refusing = False
    wait_until(lambda: t.backoff_remaining("rollback:e") == 0, BACKOFF_FIRST + 2)
    wait_until(lambda: t.backoff_remaining("e") == 0, BACKOFF_FIRST + 2)
    t.tick(now=T0 + 2)
    (pushed,) = [json.loads(x) for x in admin.lrange(keys.queue("default"), 0, -1)]
    assert pushed["periodic_slot"] == T0
    assert admin.get(keys.periodic_last_slot("e")) == str(T0)


def test_the_running_lock_middleware_runs_the_job_when_redis_cannot_answer_at_start(
    redis_server, configure, caplog
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    e = entries.parse_entry(
        "e", {"cron": "* * * * *", "job": "testapp.jobs.periodic_tick", "unique": "until_executed"}
    )
    run = e.build_job(slot=T0)
    server.client().set(keys.periodic_running("e"), run["jid"], ex=86400)
    server.stop()
    ran = []
    with caplog.at_level(logging.WARNING, "cogworker_django"):
        # Redis away: not a reason to fail the run; its lock keeps the queued TTL, and
        # the release at its end is deferred until Redis is back.
        result = RunningLockMiddleware()(run, "default", lambda: ran.append(1) or "done")
    assert result == "done" and ran == [1]
    assert "not shortened at start" in caplog.text
    assert locks.deferred().pending() == {keys.periodic_running("e"): run["jid"]}


def test_the_live_queue_listing_drops_queues_nobody_read_for_a_day(inworker, r):
    r.zadd(keys.live_queues(), {"ancient": time.time() - 2 * 86400, "recent": time.time() - 60})
    inworker()
    wait_until(lambda: r.zscore(keys.live_queues(), "default") is not None, 10)
    wait_until(lambda: r.zscore(keys.live_queues(), "ancient") is None, 10)
    assert r.zscore(keys.live_queues(), "recent") is not None
