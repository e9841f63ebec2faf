"""Results: a run's outcome and return value kept for its result_ttl, written with its
settlement, read and waited for through JobRef (core/results.py, core/jobref.py)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from testapp import result_jobs as rj

from cogworker_django import JobFailed, JobRef
from cogworker_django.core import progress, results

from ..helpers import wait_until


@pytest.fixture(autouse=True)
def project_limits(configure):
    """The test project's limiters: a worker validates every registered job's at boot."""
    configure(LIMITS={"test-pair": {"concurrency": 2}, "test-rate": {"rate": 3, "per": 2}})


def test_enqueue_returns_a_ref_equal_to_the_jid(cogworker_worker, r, prefix):
    ref = rj.add.enqueue(1, 2)
    assert isinstance(ref, JobRef) and isinstance(ref, str) and len(ref) == 24
    assert ref == ref.id == ref.jid and JobRef(str(ref)) == ref
    assert json.dumps({"jid": ref}) == f'{{"jid": "{ref}"}}'
    assert ref.status() == "queued" and ref.state == "PENDING" and not ref.ready()
    cogworker_worker(concurrency=2)
    assert ref.result(timeout=10) == 3
    assert ref.status() == "succeeded" and ref.state == "SUCCESS"
    assert ref.ready() and ref.successful() and ref.get(timeout=1) == 3


def test_a_result_is_read_from_another_process_by_jid(cogworker_worker, r, prefix):
    import subprocess
    import sys

    from ..helpers import ROOT

    jid = str(rj.add.enqueue(20, 22))
    cogworker_worker(concurrency=1)
    code = (
        "import django; django.setup()\n"
        "from cogworker_django import JobRef\n"
        f"print(JobRef({jid!r}).result(timeout=20))\n"
    )
    env = {
        "DJANGO_SETTINGS_MODULE": "testproject.test_settings",
        "PYTHONPATH": f"{ROOT}/testproject:{ROOT}",
    }
    import os

    env = {
        **os.environ,
        **env,
        "COGWORKER_SETTINGS_JSON": json.dumps({"PREFIX": prefix, "TESTING": "redis"}),
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "42"


def test_a_dead_job_raises_job_failed_with_its_error(cogworker_worker):
    ref = rj.dies.enqueue("out of ink")
    cogworker_worker(concurrency=1)
    with pytest.raises(JobFailed) as failed:
        ref.result(timeout=10)
    assert failed.value.status == "dead"
    assert failed.value.error_class == "RuntimeError"
    assert failed.value.message == "out of ink"
    assert "raise RuntimeError(message)" in failed.value.traceback
    assert ref.status() == "dead" and ref.state == "FAILURE"
    assert isinstance(ref.get(timeout=1, propagate=False), JobFailed)


def test_no_worker_times_out(r):
    ref = rj.add.enqueue(1, 1)
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        ref.result(timeout=0.5)
    assert 0.4 < time.monotonic() - began < 5


def test_result_wakes_within_a_fraction_of_a_second_of_the_end(
    cogworker_worker, r, prefix, monkeypatch
):
    # The caller's blocking slices made 4 s (the default 1 s slice ends within 0.5 s of
    # the end half the time): only the end's write can wake it within the bound below.
    # Still shorter than the client's socket_timeout (10 s).
    monkeypatch.setattr(results, "WAIT_SLICE", 4.0)
    cogworker_worker(concurrency=1)
    ref = rj.waits_then_returns.enqueue(1.5, "late")
    got: dict = {}

    def wait():
        got["value"] = ref.result(timeout=20)
        got["at"] = time.time()

    t = threading.Thread(target=wait)
    t.start()
    t.join(30)
    ended = float(r.hget(f"{prefix}:result:{ref}", "ended_at"))
    assert got["value"] == "late"
    assert got["at"] - ended < 0.5  # woken by the end's write, not a poll


def test_many_callers_waiting_on_one_job_all_wake(cogworker_worker):
    ref = rj.waits_then_returns.enqueue(1.0, 7)
    values = []
    threads = [
        threading.Thread(target=lambda: values.append(ref.result(timeout=20))) for _ in range(5)
    ]
    for t in threads:
        t.start()
    cogworker_worker(concurrency=1)
    for t in threads:
        t.join(30)
    assert values == [7] * 5


def test_result_ttl_sets_how_long_a_result_is_kept(cogworker_worker, r, prefix):
    default, hour, none = (
        rj.add.enqueue(1, 1),
        rj.kept_an_hour.enqueue("v"),
        rj.keeps_nothing.enqueue("v"),
    )
    w = cogworker_worker(concurrency=2)
    assert hour.result(timeout=10) == "v" and default.result(timeout=10) == 2
    w.run_until(lambda: r.zcard(f"{prefix}:dead") == 0 and not r.exists(f"{prefix}:queue:default"))
    assert 590 <= r.ttl(f"{prefix}:result:{default}") <= 600
    assert 3590 <= r.ttl(f"{prefix}:result:{hour}") <= 3600
    wait_until(lambda: r.llen(f"{prefix}:queue:default") == 0, 10)
    time.sleep(0.5)
    assert not r.exists(f"{prefix}:result:{none}")
    assert none.status() in (None, "succeeded")


def test_a_value_that_cannot_be_kept_leaves_the_run_succeeded(cogworker_worker, caplog):
    ref = rj.returns_unkeepable.enqueue()
    cogworker_worker(concurrency=1)
    with pytest.raises(JobFailed) as failed:
        ref.result(timeout=10)
    assert failed.value.status == "succeeded"
    assert failed.value.error_class == "ResultNotKept"
    assert "object" in failed.value.message
    assert ref.status() == "succeeded"
    assert any("was not kept" in rec.getMessage() for rec in caplog.records)


def test_an_async_job_keeps_its_value(cogworker_worker):
    ok, bad = rj.async_add.enqueue(2, 3), rj.async_dies.enqueue()
    cogworker_worker(concurrency=1, async_concurrency=5)
    assert ok.result(timeout=10) == 5
    with pytest.raises(JobFailed) as failed:
        bad.result(timeout=10)
    assert failed.value.error_class == "ValueError" and failed.value.status == "dead"


def test_aresult_waits_without_holding_the_loop(cogworker_worker):
    import asyncio

    ref = rj.add.enqueue(4, 5)
    cogworker_worker(concurrency=1)

    async def main():
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        value = await ref.aresult(timeout=10)
        ticker.cancel()
        return value, ticks

    value, ticks = asyncio.run(main())
    assert value == 9


def test_progress_is_read_while_the_job_runs_and_the_last_after(cogworker_worker, r, prefix):
    ref = rj.reports_progress.enqueue(10, 0.0, "hold-1")
    cogworker_worker(concurrency=1)
    seen = wait_until(lambda: ref.progress(), 10, message="progress while running")
    assert seen["total"] == 10 and seen["message"].startswith("step ") and seen["done"] >= 1
    assert ref.status() == "running" and ref.state == "STARTED"
    r.rpush(f"{prefix}:test:hold-1", "go")
    assert ref.result(timeout=10) == 10
    last = ref.progress()
    assert last["done"] == 10 and last["message"] == "step 10" and last["total"] == 10


def test_progress_writes_are_throttled(cogworker_worker, r, prefix):
    from cogworker_django.store import scripts  # noqa: F401

    ref = rj.reports_progress.enqueue(5000)
    monitor_counts = {"hset": 0}
    cogworker_worker(concurrency=1)
    assert ref.result(timeout=20) == 5000
    # 5000 reports in well under a second: a handful of writes, and the last kept.
    assert ref.progress()["done"] == 5000
    del monitor_counts


def test_async_progress(cogworker_worker):
    ref = rj.async_reports_progress.enqueue(3)
    cogworker_worker(concurrency=1, async_concurrency=3)
    assert ref.result(timeout=10) == 3
    assert ref.progress()["message"] == "async step 3"


def test_progress_refuses_garbage():
    job = progress.RunningJob({"jid": "x" * 24, "func": "f"})
    for bad in (float("nan"), float("inf"), -1):
        with pytest.raises(ValueError):
            job.progress(bad)
    with pytest.raises(TypeError):
        job.progress("1")
    with pytest.raises(TypeError):
        job.progress(1, message=3)


def test_the_test_modes_keep_results_and_progress():
    from cogworker_django import testing

    with testing.inline():
        ref = rj.reports_progress.enqueue(3)
        assert ref.result(timeout=0) == 3 and ref.status() == "succeeded"
        assert ref.progress()["message"] == "step 3"
        with pytest.raises(RuntimeError):
            rj.dies.enqueue("inline death")
    with testing.fake():
        ref = rj.add.enqueue(2, 2)
        with pytest.raises(TimeoutError):
            ref.result(timeout=0)
        assert rj.add.perform_one() == 4
        assert ref.result(timeout=0) == 4


def test_result_of_a_cancelled_and_of_an_expired_job(cogworker_worker, r, prefix, configure):
    from testapp import jobs as tj

    from cogworker_django import api

    configure(HEARTBEAT_INTERVAL=0.5)  # the cancel flag reaches the run at a beat
    expired = tj.expiring.enqueue("late")
    time.sleep(2.5)  # past its expires_in (2 s) before any worker takes it
    running = tj.cooperative_cancel.enqueue("c")
    cogworker_worker(concurrency=2)
    wait_until(lambda: r.hget(tj.runs_key(), "c") == "1", 10, message="running")
    assert api.cancel(str(running)) == "running"
    with pytest.raises(JobFailed) as cancelled:
        running.result(timeout=15)
    assert cancelled.value.status == "cancelled" and running.state == "REVOKED"
    with pytest.raises(JobFailed) as late:
        expired.result(timeout=15)
    assert late.value.status == "expired" and "expires_at" in late.value.message
    assert expired.status() == "expired" and expired.state == "REVOKED"
    assert r.hget(tj.runs_key(), "late") is None  # never ran
