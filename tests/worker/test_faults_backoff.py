"""Deterministic errors back off (rule 5) and one bad entry never stops the others
(rule 6): the poller's chores with a broken key, on a private redis-server."""

from __future__ import annotations

import time

import redis.exceptions as rx
from testapp import jobs as tj

from cogworker_django.core import payload
from cogworker_django.store import errors, keys

from ..helpers import after_boot_key_guard, wait_until


def test_backoff_doubles_on_deterministic_errors_only(caplog):
    now = [1000.0]
    b = errors.Backoff(first=5, maximum=20, clock=lambda: now[0])
    calls = []

    def wrongtype():
        calls.append(now[0])
        raise rx.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")

    def at(t):
        now[0] = t
        return b.run("Chore", wrongtype)

    assert not any(at(t) for t in (1000, 1000, 1004.9, 1005, 1014.9, 1015, 1034.9, 1035, 1054.9))
    assert calls == [1000, 1005, 1015, 1035]  # 5 s, 10 s, 20 s, then capped at 20 s
    assert "Chore failed (next try in 5s): ResponseError: WRONGTYPE" in caplog.text
    assert "(next try in 20s)" in caplog.text

    def refused():
        calls.append(now[0])
        raise rx.ConnectionError("refused")

    # an outage is retried at the caller's pace, never backed off
    assert b.run("Other", refused) is False
    assert b.run("Other", refused) is False
    assert len(calls) == 6
    # a success resets the backoff
    now[0] = 1100
    assert b.run("Chore", lambda: None) is True
    assert at(1100) is False and at(1105) is False
    assert calls[-2:] == [1100, 1105]


def test_poller_backs_off_a_broken_key_and_isolates_a_bad_entry(
    redis_server, configure, inworker, worker_log
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    r = server.client()
    # the key guard only at boot, so the broken keys below stay broken for this test
    w = inworker(settings={"KEYGUARD_INTERVAL": 600})
    after_boot_key_guard(r, keys.prefix())  # its boot pass is done before the key breaks
    # One due retry whose queue key is broken, one that is fine: the fine one still moves.
    r.set(keys.queue("broken"), "not a list")
    stuck = payload.build("testapp.jobs.record", ["stuck"], queue="broken")
    fine = payload.build("testapp.jobs.record", ["fine"], queue="default")
    r.zadd(keys.retry(keys.home_of("default")), {payload.encode(stuck): 1, payload.encode(fine): 2})
    wait_until(lambda: r.hget(f"{keys.prefix()}:test:runs", "fine") == "1", 10)
    assert r.zcard(keys.retry(keys.home_of("default"))) == 1
    assert (
        "a due job in" in worker_log.log()
        and "not moved: ResponseError: WRONGTYPE" in worker_log.log()
    )

    # A broken schedule set fails the whole chore: it backs off instead of failing (and
    # logging) on every poll (POLL_INTERVAL is 0.2 s here).
    r.set(keys.schedule(keys.home_of("default")), "not a zset")
    time.sleep(3)
    failures = worker_log.log().count("Scheduled poller failed (next try in")
    assert failures == 1, worker_log.log()[-3000:]
    tj.record.enqueue("meanwhile")  # pushing and running go on
    wait_until(lambda: r.hget(f"{keys.prefix()}:test:runs", "meanwhile") == "1", 10)
    # Fixed: the poller picks up again after its backoff.
    r.delete(keys.schedule(keys.home_of("default")))
    tj.record.enqueue_in(0.1, "scheduled")
    wait_until(lambda: r.hget(f"{keys.prefix()}:test:runs", "scheduled") == "1", 15)
    assert worker_log.log().count("Scheduled poller failed (next try in") <= 2
    w.stop()


def test_pushes_log_a_broken_queue_listing_once_a_minute_not_per_push(r, caplog):
    r.set(keys.queues(), "not a set")
    jids = [tj.record.enqueue(f"t{i}") for i in range(50)]
    assert r.llen(keys.queue("default")) == 50 and all(jids)  # rule 1: every push went in
    errors_logged = [rec for rec in caplog.records if "not updated" in rec.getMessage()]
    assert len(errors_logged) == 1
