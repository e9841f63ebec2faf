"""A job interrupted by its worker's stop counts it as an orphaning: one that never
finishes is requeued at each stop up to MAX_ORPHANINGS (the production default, 3), then
goes to dead instead of coming back after every restart, forever. The shutdown line
names it and says how to give it a time limit. Real worker processes, stopped by TERM."""

from __future__ import annotations

import json

import pytest
from testapp import jobs as tj

from cogworker_django.store import keys

from ..helpers import wait_until

# A job that never finishes within the (short) shutdown timeout: an infinite loop's stand-in.
FOREVER = 3600


def _runs(r, token):
    return int(r.hget(f"{keys.prefix()}:test:runs", token) or 0)


@pytest.mark.parametrize("fetch", ["reliable", "basic"])
def test_a_job_interrupted_at_every_stop_ends_in_dead(worker, r, fetch):
    jid = tj.count_then_sleep.enqueue(FOREVER, "spin")
    dead_key = keys.dead(keys.home_of("default"))
    settings = {"SHUTDOWN_TIMEOUT": 0.3}  # MAX_ORPHANINGS: the default, 3
    for stop in range(1, 4):  # three stops: requeued each time, counted
        w = worker(settings=settings, args=["--fetch", fetch])
        wait_until(lambda n=stop: _runs(r, "spin") == n, 20, message=f"run {stop}")
        assert w.stop() == 0
        log = w.log()
        line = next(x for x in log.splitlines() if "unfinished at shutdown" in x)
        assert f"testapp.jobs.count_then_sleep (jid {jid}, interrupted {stop}x)" in line, line
        assert "MAX_ORPHANINGS (3)" in line and "@job(timeout=...)" in line, line
        assert "still running (testapp.jobs.count_then_sleep" in log
        (queued,) = r.lrange(keys.queue("default"), 0, -1)
        assert json.loads(queued)["orphan_count"] == stop
        assert r.zcard(dead_key) == 0
    w = worker(settings=settings, args=["--fetch", fetch])  # the fourth stop: dead
    wait_until(lambda: _runs(r, "spin") == 4, 20, message="run 4")
    assert w.stop() == 0
    assert r.llen(keys.queue("default")) == 0
    (dead,) = [json.loads(x) for x in r.zrange(dead_key, 0, -1)]
    assert dead["jid"] == jid and dead["error_class"] == "OrphanedTooOften"
    assert "interrupted 3 times by a worker's stop" in dead["error_message"]
    assert "@job(timeout=...)" in dead["error_message"]
    assert f"(jid {jid}) filed in dead" in w.log()
    w = worker(settings=settings, args=["--fetch", fetch])  # nothing comes back
    w.wait_for_log(r"cogworker \S+ started")
    assert w.stop() == 0
    assert _runs(r, "spin") == 4


def test_an_async_job_cancelled_at_the_stop_is_counted_too(worker, r):
    """TERM cancels a coroutine still running past SHUTDOWN_TIMEOUT and requeues it: an
    interruption like a thread's."""
    from testapp import async_jobs

    jid = async_jobs.started_then_waits.enqueue(FOREVER, "coro")
    w = worker(settings={"SHUTDOWN_TIMEOUT": 0.3})
    wait_until(lambda: r.hget(async_jobs.key("starts"), "coro") == "1", 20, message="start")
    assert w.stop() == 0
    (queued,) = [json.loads(x) for x in r.lrange(keys.queue("default"), 0, -1)]
    assert queued["jid"] == jid and queued["orphan_count"] == 1
    assert f"async_jobs.started_then_waits (jid {jid}, interrupted 1x)" in w.log()
