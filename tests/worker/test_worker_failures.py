"""Failures: retry with backoff, then dead; the dead set's caps; the backoff formula."""

from __future__ import annotations

import json
import time

import pytest
from testapp import jobs as tj

from cogworker_django.core import payload
from cogworker_django.worker import failures

from ..helpers import wait_until

# Retries and dead behave the same on a Redis Cluster: every test runs on both
# (tests/cluster_support.py).
pytestmark = pytest.mark.cluster


def _members(r, key) -> list[dict]:
    return [json.loads(m) for m in r.zrange(key, 0, -1)]


def test_always_failing_job_goes_to_retry_then_dead(inworker, r, prefix):
    w = inworker(settings={"RETRY_BACKOFF": "testapp.jobs.backoff_2s"})
    before = time.time()
    jid = tj.always_fails.enqueue("kaboom")  # retry=2: three runs in all
    ((raw, score),) = wait_until(
        lambda: r.zrange(f"{prefix}:retry", 0, -1, withscores=True), 10, message="in retry"
    )
    entry = json.loads(raw)
    assert entry["jid"] == jid
    assert entry["retry_count"] == 1
    assert entry["error_class"] == "ValueError"
    assert entry["error_message"] == "kaboom"
    assert before <= entry["failed_at"] <= time.time()
    assert entry["first_failed_at"] == entry["failed_at"]
    assert "Traceback (most recent call last)" in entry["traceback"]
    assert "raise ValueError(message)" in entry["traceback"]
    # Score = when it runs again: failed_at + the backoff (2 s here).
    assert score == pytest.approx(entry["failed_at"] + 2.0, abs=0.05)
    (dead,) = wait_until(lambda: _members(r, f"{prefix}:dead"), 15, message="in dead")
    assert dead["jid"] == jid
    assert dead["retry_count"] == 3
    assert dead["error_class"] == "ValueError"
    assert dead["first_failed_at"] < dead["failed_at"]
    assert r.zcard(f"{prefix}:retry") == 0
    assert int(r.hget(f"{prefix}:test:runs", jid)) == 3
    w.stop()
    assert r.get(f"{prefix}:stat:failed") == "3"


def test_retry_false_goes_straight_to_dead(inworker, r, prefix):
    w = inworker()
    jid = tj.fails_once_dead.enqueue("nope")
    (dead,) = wait_until(lambda: _members(r, f"{prefix}:dead"), 10, message="in dead")
    assert dead["jid"] == jid
    assert dead["error_class"] == "RuntimeError"
    assert dead["retry_count"] == 1
    assert r.zcard(f"{prefix}:retry") == 0
    w.stop()


def test_dead_set_is_capped_by_count_and_age(inworker, r, prefix):
    old = payload.encode(payload.build("testapp.jobs.noop", jid="ancient"))
    r.zadd(f"{prefix}:dead", {old: time.time() - 1000})
    w = inworker(settings={"DEAD_MAX_JOBS": 3, "DEAD_TIMEOUT": 100}, concurrency=1)
    jids = [tj.fails_once_dead.enqueue(str(i)) for i in range(5)]
    wait_until(
        lambda: r.hlen(f"{prefix}:test:runs") == 0 and r.llen(f"{prefix}:queue:default") == 0,
        10,
        message="queue drained",
    )
    wait_until(
        lambda: {d["jid"] for d in _members(r, f"{prefix}:dead")} == set(jids[2:]),
        10,
        message="the newest three kept",
    )
    w.stop()


# The formula (unit) ------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 5, 10, 25])
def test_backoff_formula_bounds(configure, count):
    configure(RETRY_BACKOFF=None)
    low = count**4 + 15
    high = low + 10 * count
    samples = [failures.backoff(count) for _ in range(200)]
    assert all(low <= s <= high for s in samples), (min(samples), max(samples))
    # Jitter: not every retry of a burst lands at the same moment.
    assert len(set(samples)) > 1


def test_backoff_grows_with_the_count(configure):
    """The built-in formula, through failures.backoff: each retry's delay lies in
    n ** 4 + 15 + [0, 10 n], and even the slowest try n comes before the quickest
    try n + 1."""
    configure(RETRY_BACKOFF=None)
    previous_max = 0.0
    for n in range(1, 25):
        samples = [failures.backoff(n) for _ in range(200)]
        assert all(n**4 + 15 <= s <= n**4 + 15 + 10 * n for s in samples), (n, samples[:5])
        assert max(samples) > min(samples)  # jittered, not a fixed delay
        assert min(samples) > previous_max, n
        previous_max = max(samples)


def test_retry_backoff_setting_replaces_the_formula(configure):
    configure(RETRY_BACKOFF="testapp.jobs.backoff_2s")
    assert failures.backoff(7) == 2.0


def test_after_failure_counts_and_routes():
    job = payload.build("testapp.jobs.always_fails", retry=2)
    targets = []
    for _ in range(3):
        target, _score = failures.after_failure(job, ValueError("x"))
        targets.append(target)
    assert targets == ["retry", "retry", "dead"]
    assert job["retry_count"] == 3


def test_after_failure_with_garbage_retry_count_and_option():
    job = payload.build("x.y", retry="lots")  # unreadable option: no retries (cautious)
    job["retry_count"] = "???"
    target, _ = failures.after_failure(job, ValueError("x"))
    assert (target, job["retry_count"]) == ("dead", 1)
