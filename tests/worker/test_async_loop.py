"""Async jobs on the worker's one event loop, in real workers: a shared asyncio client
serves every run; a thousand coroutines wait at once in one process, never more than
ASYNC_CONCURRENCY; plain and async jobs side by side; the start line; the settings."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from testapp import async_jobs as aj
from testapp import jobs as tj

from cogworker_django import conf

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
