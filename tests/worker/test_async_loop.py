"""Async jobs on the worker's one event loop, in real workers: a shared asyncio client
serves every run; a thousand coroutines wait at once in one process, never more than
ASYNC_CONCURRENCY; plain and async jobs side by side, under load and timed against each
other (a process's threads and event loop filled at once); the start line; the
settings."""

from __future__ import annotations

import json
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from testapp import async_jobs as aj
from testapp import jobs as tj

from cogworker_django import conf
from cogworker_django.store import keys

from ..helpers import run_command, wait_until


def runs(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def dead_jobs(r, prefix) -> list[dict]:
    return [json.loads(m) for m in r.zrange(f"{prefix}:dead", 0, -1)]


def test_a_shared_asyncio_client_serves_a_thousand_runs(worker, r, prefix):
    # The client was made once, at import; it binds to the first loop that uses it. On a
    # loop per run (asyncio.run), every run after the first went to dead with "bound to
    # a different event loop".
    aj.shared_client.enqueue_many([(f"s-{i}",) for i in range(1000)])
    w = worker()
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 1000, 60, message="1000 runs")
    assert w.stop() == 0
    assert set(runs(r, prefix).values()) == {1}
    assert int(r.get(f"{prefix}:test:shared")) == 1000
    assert dead_jobs(r, prefix) == []
    assert r.zcard(f"{prefix}:retry") == 0


def test_a_thousand_coroutines_wait_at_once_in_one_process(worker, r, prefix):
    aj.all_at_once.enqueue_many([(1000, 1.0, f"g-{i}") for i in range(1000)])
    w = worker(args=["--async-concurrency", "1000"])
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 1000, 90, message="1000 runs")
    assert w.stop() == 0
    # Measured by the jobs themselves: every one was waiting at the same moment (each
    # waits for all of them, then 1 s).
    assert int(r.get(f"{prefix}:test:peak")) == 1000
    assert set(runs(r, prefix).values()) == {1}
    assert "async_concurrency=1000" in w.log()


def test_never_more_coroutines_at_once_than_async_concurrency(worker, r, prefix):
    aj.gauge_wait.enqueue_many([(0.2, f"g-{i}") for i in range(300)])
    w = worker(settings={"ASYNC_CONCURRENCY": 40})
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 300, 60, message="300 runs")
    assert w.stop() == 0
    assert int(r.get(f"{prefix}:test:peak")) == 40
    assert set(runs(r, prefix).values()) == {1}


def test_plain_and_async_jobs_side_by_side_under_load(worker, r, prefix):
    tj.record.enqueue_many([(f"plain-{i}",) for i in range(500)])
    aj.where_am_i.enqueue_many([(f"async-{i}",) for i in range(500)])
    tj.slow.enqueue_many([(0.2, f"slow-{i}") for i in range(20)])
    w = worker(settings={"CONCURRENCY": 4, "ASYNC_CONCURRENCY": 50})
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 1020, 60, message="1020 runs")
    assert w.stop() == 0
    assert set(runs(r, prefix).values()) == {1}
    threads = r.hgetall(f"{prefix}:test:threads")
    assert len(threads) == 500 and set(threads.values()) == {"event-loop"}
    assert dead_jobs(r, prefix) == []


def test_the_start_line_shows_both_concurrencies(worker):
    w = worker(args=["-c", "3", "--async-concurrency", "7"])
    assert "concurrency=3 async_concurrency=7 " in w.log()
    assert w.stop() == 0


@pytest.mark.parametrize("value", [0, -1, "lots", True, float("nan"), 2.5])
def test_async_concurrency_refused_with_its_key_and_value(settings, value):
    settings.COGWORKER = {"ASYNC_CONCURRENCY": value}
    with pytest.raises(ImproperlyConfigured) as err:
        conf.get()
    assert "ASYNC_CONCURRENCY" in str(err.value) and repr(value) in str(err.value)


def test_async_concurrency_default_and_setting(settings):
    settings.COGWORKER = {}
    assert conf.get().ASYNC_CONCURRENCY == 100
    settings.COGWORKER = {"ASYNC_CONCURRENCY": 7}
    assert conf.get().ASYNC_CONCURRENCY == 7


def test_manage_py_check_and_the_worker_refuse_a_bad_async_concurrency(prefix):
    checked = run_command(prefix, "check", settings={"ASYNC_CONCURRENCY": "lots"})
    assert checked.returncode != 0
    assert "COGWORKER['ASYNC_CONCURRENCY'] = 'lots' is invalid" in checked.stderr
    booted = run_command(prefix, "cogworker", settings={"ASYNC_CONCURRENCY": 0})
    assert booted.returncode != 0
    assert "COGWORKER['ASYNC_CONCURRENCY'] = 0 is invalid" in booted.stderr
    flag = run_command(prefix, "cogworker", "--async-concurrency", "0")
    assert flag.returncode != 0
    assert "--async-concurrency must be at least 1, got 0" in flag.stderr
    # The setting's cap holds on the command line too (100,000; CONCURRENCY's 10,000).
    over = run_command(prefix, "cogworker", "--async-concurrency", "100001")
    assert over.returncode != 0
    assert "--async-concurrency 100001: must be <= 100000" in over.stderr
    threads = run_command(prefix, "cogworker", "-c", "10001")
    assert threads.returncode != 0 and "--concurrency 10001: must be <= 10000" in threads.stderr


# Plain and async jobs side by side, timed against each other (docs/workers.md "Plain and
# async jobs side by side"): a fetch takes async jobs only for the event loop's free
# slots and plain ones only for free threads (lua/fetch.lua, by the async jobs' paths), so
# with plain jobs on one queue and coroutines on another both sides run at once, and a
# process never takes jobs it cannot start now.
#
# Before: a fetch asked for the loop's slots only once an async job had been seen, and
# took jobs of either kind from the first queue that had some; with plain jobs on the
# first queue, the coroutines on the second waited until the plain ones were nearly
# drained (or a probe every 5 s), and jobs fetched for the busy side waited in this
# process.


def _counts(r) -> tuple[int, int]:
    runs = r.hgetall(tj.runs_key())
    plain = sum(1 for k in runs if k.startswith("p"))
    return plain, len(runs) - plain


def test_plain_and_async_jobs_on_two_queues_run_side_by_side(configure, worker, r):
    """4 threads and 20 loop slots; 80 plain jobs of 0.2 s on `plain` (read first) and 80
    coroutines of 1 s on `aq`: each side alone takes 4 s. When half the plain jobs are
    done, the coroutines are running too (before: none had started)."""
    tj.slow.using(queue="plain").enqueue_many([(0.2, f"p{i}") for i in range(80)])
    aj.gauge_wait.using(queue="aq").enqueue_many([(1.0, f"a{i}") for i in range(80)])
    worker(args=["-c", "4", "--async-concurrency", "20", "-q", "plain", "-q", "aq"])
    samples = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        plain, async_ = _counts(r)
        samples.append((plain, async_, int(r.get(aj.key("gauge")) or 0)))
        if plain >= 80 and async_ >= 80:
            break
        time.sleep(0.05)
    assert samples[-1][:2] == (80, 80), samples[-1]
    at_half = next(s for s in samples if s[0] >= 40)
    assert at_half[1] >= 20, samples  # one full round of the 20 slots at least
    # The loop's slots stayed busy while plain jobs ran (a gauge of the coroutines in).
    while_plain = [g for p, _a, g in samples if 8 <= p < 72]
    assert sum(while_plain) / len(while_plain) >= 14, samples


def test_a_process_takes_no_plain_job_it_cannot_start(configure, worker, r):
    """2 threads and 10 loop slots; 24 plain jobs of 0.5 s on `plain` (read first) and
    40 coroutines of 0.5 s on `aq`: this process's in-progress list never holds more
    plain jobs than its 2 threads run, so another worker starting now would find the
    others waiting. (Before: once an async job had come, each fetch asked for threads and
    slots together and took plain jobs for the slots, which waited here for a thread.)"""
    tj.slow.using(queue="plain").enqueue_many([(0.5, f"p{i}") for i in range(24)])
    aj.gauge_wait.using(queue="aq").enqueue_many([(0.5, f"a{i}") for i in range(40)])
    w = worker(args=["-c", "2", "--async-concurrency", "10", "-q", "plain", "-q", "aq"])
    inprogress = None
    most = 0
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and _counts(r) != (24, 40):
        if inprogress is None:
            found = [k for k in r.keys(f"{keys.prefix()}:inprogress:*") if f":{w.pid}:" in k]
            inprogress = found[0] if found else None
        if inprogress:
            listed = r.lrange(inprogress, 0, -1)
            most = max(most, sum("testapp.jobs.slow" in raw for raw in listed))
        time.sleep(0.02)
    assert _counts(r) == (24, 40)
    assert inprogress and most <= 2, most


def test_async_jobs_behind_plain_ones_on_one_queue_still_start(configure, worker, r):
    """One shared queue: the fetch stops at a job of a kind with no room, and a thread or
    a slot coming free ends the wait at once (no spin, no stall): 30 plain jobs of 0.1 s
    and 30 coroutines of 0.3 s, interleaved, all done."""
    for i in range(30):
        tj.slow.enqueue(0.1, f"p{i}")
        aj.gauge_wait.enqueue(0.3, f"a{i}")
    worker(args=["-c", "2", "--async-concurrency", "3"])
    wait_until(lambda: _counts(r) == (30, 30), 40, message="every job ran")
