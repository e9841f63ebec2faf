"""Filing a failure never raises: a hostile RETRY_BACKOFF hook, garbage in the payload or
a middleware's unusable Reschedule delay must not kill a processor thread, and so must
never leave a failed job listed to be requeued and run again and again.

Each worker test runs a real (in-process) worker; a job with ``retry=1`` must run exactly twice (the
run and its one retry) and end in dead, with no thread lost.
"""

from __future__ import annotations

import json
import logging
import math
import time

import pytest
from testapp import jobs as tj

from cogworker_django.core import locks, payload
from cogworker_django.store import errors, keys
from cogworker_django.worker import failures

from ..helpers import wait_until


def runs(r) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{keys.prefix()}:test:runs").items()}


@pytest.mark.parametrize("hook", ["backoff_raises", "backoff_inf", "backoff_nan", "backoff_text"])
def test_a_hostile_backoff_hook_files_the_failure_with_the_builtin_backoff(
    inworker, worker_log, r, hook
):
    inworker(settings={"RETRY_BACKOFF": f"testapp.jobs.{hook}"})
    jid = tj.always_fails.using(retry=1).enqueue("hostile")
    wait_until(
        lambda: r.zcard(keys.retry(keys.home_of("default"))) == 1,
        15,
        message="the failure filed in retry",
    )
    ((raw, score),) = r.zrange(keys.retry(keys.home_of("default")), 0, -1, withscores=True)
    assert json.loads(raw)["jid"] == jid
    # the built-in formula for the first retry: 15 s + 1 + up to 10 s
    assert 14 < score - time.time() <= 26 + 1
    assert runs(r) == {jid: 1}
    # Make the retry due now rather than wait the built-in backoff out.
    r.zadd(keys.retry(keys.home_of("default")), {raw: time.time()})
    wait_until(
        lambda: r.zcard(keys.dead(keys.home_of("default"))) == 1,
        15,
        message="the retry's failure in dead",
    )
    time.sleep(1.5)  # a requeued copy would have run again by now
    assert runs(r) == {jid: 2}
    assert r.zcard(keys.retry(keys.home_of("default"))) == 0
    assert r.llen(keys.queue("default")) == 0
    listed = [k for k in r.scan_iter(f"{keys.prefix()}:inprogress:*") if r.llen(k)]
    assert listed == []
    log = worker_log.log()
    assert "died" not in log
    assert log.count(f"RETRY_BACKOFF testapp.jobs.{hook} failed") == 1


def test_the_worker_threads_survive_a_hostile_hook_and_keep_working(inworker, worker_log, r):
    inworker(settings={"RETRY_BACKOFF": "testapp.jobs.backoff_raises"}, concurrency=2)
    for i in range(6):
        tj.always_fails.using(retry=3).enqueue(f"x{i}")
    wait_until(lambda: r.zcard(keys.retry(keys.home_of("default"))) == 6, 15)
    for i in range(10):
        tj.record.enqueue(f"after{i}")
    wait_until(lambda: sum(1 for k in runs(r) if k.startswith("after")) == 10, 15)
    assert "died" not in worker_log.log()


@pytest.mark.parametrize(
    "answer", [RuntimeError("no"), math.inf, -math.inf, math.nan, "soon", None, -1, True, [3]]
)
def test_backoff_falls_back_to_the_builtin_formula(configure, caplog, answer, monkeypatch):
    def hook(_count):
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(tj, "hostile_hook", hook, raising=False)
    configure(RETRY_BACKOFF="testapp.jobs.hostile_hook")
    errors.reporter.reset()  # (what was logged once before this variant)
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        values = [failures.backoff(2) for _ in range(3)]
    assert all(15 + 16 <= v <= 15 + 16 + 20 for v in values)
    assert caplog.text.count("RETRY_BACKOFF testapp.jobs.hostile_hook failed") == 1


def test_backoff_keeps_a_good_hooks_answer(configure):
    configure(RETRY_BACKOFF="testapp.jobs.backoff_2s")
    assert failures.backoff(7) == 2.0


@pytest.mark.parametrize("unique_for", ["abc", "nan", "inf", -3, [1], {"a": 1}, True])
def test_a_lock_extension_survives_garbage_unique_for(r, unique_for):
    job = payload.build("testapp.jobs.record", ["u"], queue="default")
    job.update(unique="until_executed", unique_digest="d1", unique_for=unique_for)
    r.set(keys.unique("d1", keys.home_of("default")), job["jid"], ex=10)
    locks.extend_job_locks(job, 30)
    # the lock now covers the wait plus the queued lifetime (UNIQUE_LOCK_TTL: 1 day)
    assert 86000 < r.ttl(keys.unique("d1", keys.home_of("default"))) <= 86400 + 30


@pytest.mark.parametrize("wait", [math.inf, math.nan, 1e300])
def test_a_lock_extension_survives_an_absurd_wait(r, wait):
    job = payload.build("testapp.jobs.record", ["u"], queue="default")
    job.update(unique="until_executed", unique_digest="d2", unique_for=60)
    r.set(keys.unique("d2", keys.home_of("default")), job["jid"], ex=10)
    locks.extend_job_locks(job, wait)
    assert r.ttl(keys.unique("d2", keys.home_of("default"))) > 0
