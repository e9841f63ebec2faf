"""Pickup latency: a job pushed into an idle worker starts within a round trip or two,
at any concurrency, without the worker polling (docs/workers.md "Pickup latency").

Before doorbells (store/bell.py) a worker at ``-c 10`` fed a trickle of 50 jobs a
second started them 258 ms after their push (median; p90 about 900 ms): the idle pause
doubled up to ``FETCH_IDLE_MAX_INTERVAL`` and stayed there. These tests run real worker
processes at the production ``FETCH_IDLE_MAX_INTERVAL`` (1 s), push jobs one at a time
and read when each started (the job stamps it). The bounds are generous, for a loaded
machine: the measure is printed, and docs/performance.md has the numbers of a quiet one.
"""

from __future__ import annotations

import statistics
import time

import pytest
from testapp import jobs

from cogworker_django.store import keys

from ..helpers import wait_until

PRODUCTION_IDLE = {"FETCH_IDLE_MAX_INTERVAL": 1.0}


def _trickle(r, count: int, rate: float) -> list[float]:
    """Push ``count`` jobs (testapp.jobs.timed, 0 s) one at a time at ``rate`` a second;
    the seconds from each push to its job's start, once all ran."""
    pushed: dict[str, float] = {}
    gap = 1.0 / rate
    next_at = time.monotonic()
    for i in range(count):
        next_at += gap
        time.sleep(max(0.0, next_at - time.monotonic()))
        at = time.time()
        jid = jobs.timed.enqueue(0, token=f"t{i}")
        pushed[str(jid)] = at
    wait_until(lambda: r.hlen(jobs.runs_key()) >= count, 30, message="every job ran")
    stamps = r.hgetall(jobs.timeline_key())
    return sorted(float(stamps[f"{jid}:start"]) - at for jid, at in pushed.items())


def _quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


@pytest.mark.parametrize("concurrency", [1, 10, 50, 100])
def test_a_trickle_starts_within_milliseconds_at_any_concurrency(configure, worker, r, concurrency):
    worker(settings={**PRODUCTION_IDLE, "CONCURRENCY": concurrency})
    time.sleep(1.5)  # idle for longer than the longest wait on the doorbells
    waits = _trickle(r, 60, 50)
    median, p90 = statistics.median(waits), _quantile(waits, 0.9)
    print(f"-c {concurrency}: median {median * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms")
    # Before doorbells: 258 ms median and about 900 ms p90 at -c 10.
    assert median < 0.1, waits
    assert p90 < 0.4, waits


def test_a_worker_idle_for_longer_than_its_wait_still_starts_a_job_at_once(configure, worker, r):
    """The wait on the doorbells ends at FETCH_IDLE_MAX_INTERVAL and begins again: a job
    pushed at any moment of an idle worker's life is picked up at once, five times over,
    at moments spread across the wait."""
    worker(settings={**PRODUCTION_IDLE, "CONCURRENCY": 10})
    waits = []
    for i in range(5):
        time.sleep(1.3 + i * 0.17)
        at = time.time()
        jid = jobs.timed.enqueue(0, token=f"idle{i}")
        wait_until(lambda jid=jid: r.hexists(jobs.timeline_key(), f"{jid}:start"), 10)
        waits.append(float(r.hget(jobs.timeline_key(), f"{jid}:start")) - at)
    assert statistics.median(waits) < 0.1, waits


def test_a_push_by_another_client_is_found_at_the_waits_end(configure, worker, r):
    """A push that rings no bell (redis-cli, an older release) is found when the wait
    ends, FETCH_IDLE_MAX_INTERVAL at most, as before doorbells."""
    from cogworker_django.core import payload

    worker(settings={**PRODUCTION_IDLE, "CONCURRENCY": 10})
    time.sleep(1.5)
    job = payload.build("testapp.jobs.timed", [0], {"token": "raw"}, queue="default")
    at = time.time()
    r.lpush(keys.queue("default"), payload.encode(job))
    wait_until(lambda: r.hget(jobs.runs_key(), "raw") == "1", 10)
    started = float(r.hget(jobs.timeline_key(), f"{job['jid']}:start"))
    assert started - at < 1.0 + 0.5


def test_a_batch_member_starts_as_soon_as_a_plain_job(configure, worker, r):
    """A member of a batch, pushed and counted by its own script (lua/batch_push.lua),
    rings its queue's doorbell as an ordinary push does: without it an idle worker found
    it at its wait's end (2.5 s of a 3 s FETCH_IDLE_MAX_INTERVAL measured, against 3 ms
    for a plain job)."""
    from cogworker_django import Batch

    worker(settings={"FETCH_IDLE_MAX_INTERVAL": 3.0, "CONCURRENCY": 2})
    waits = []
    for i in range(3):
        time.sleep(3.2)  # idle: every thread waits, the feeder on the doorbells
        at = time.time()
        with Batch():
            jid = jobs.timed.enqueue(0, token=f"member{i}")
        wait_until(lambda jid=jid: r.hexists(jobs.timeline_key(), f"{jid}:start"), 10)
        waits.append(float(r.hget(jobs.timeline_key(), f"{jid}:start")) - at)
    assert statistics.median(waits) < 0.5, waits


def test_an_idle_worker_costs_redis_about_two_commands_a_second(configure, worker, redis_server):
    """What an idle worker costs Redis (docs/workers.md "Pickup latency"): its feeder's
    BRPOP on the doorbells and, when that wait ends, one fetch: about two commands a
    second at FETCH_IDLE_MAX_INTERVAL = 1, whatever its concurrency (a private Redis:
    this worker is its only client)."""
    server = redis_server()
    worker(redis_url=server.url, settings={**PRODUCTION_IDLE, "CONCURRENCY": 50})
    client = server.client()
    time.sleep(1.5)
    before = client.info("commandstats")
    time.sleep(5)
    after = client.info("commandstats")

    def calls(stat: str) -> int:
        return after.get(stat, {}).get("calls", 0) - before.get(stat, {}).get("calls", 0)

    assert 3 <= calls("cmdstat_brpop") <= 8, after
    # Polling every 20 ms would be 250 fetches in 5 s; the heartbeat, the poller and the
    # other chores at the test timings (FAST_SETTINGS) are the rest.
    assert calls("cmdstat_evalsha") < 120, after


def test_a_burst_wakes_as_many_idle_workers_as_it_needs(configure, worker, r):
    """One push of four jobs rings once; the idle worker that takes the ring fetches two
    (its two threads), finds its fetch filled and rings again, so the second idle worker
    starts the other two at once, not at the end of its wait (FETCH_IDLE_MAX_INTERVAL)
    nor when the first worker's threads come free. Four bursts: a wait that happened to
    end just after the push can't pass them all."""
    for _ in range(2):
        worker(settings={**PRODUCTION_IDLE, "CONCURRENCY": 2})
    spreads = []
    for burst in range(4):
        time.sleep(1.1)  # both idle, in their wait
        refs = jobs.timed.enqueue_many([(1.2, f"b{burst}-{i}") for i in range(4)])
        wait_until(lambda burst=burst: r.hlen(jobs.runs_key()) >= 4 * (burst + 1), 20)
        stamps = r.hgetall(jobs.timeline_key())
        starts = [float(stamps[f"{jid}:start"]) for jid in refs]
        spreads.append(max(starts) - min(starts))
    assert max(spreads) < 0.3, spreads
