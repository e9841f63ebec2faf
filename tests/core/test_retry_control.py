"""Retry control from inside a job (core/retry.py, worker/failures.py): retry_on,
retry_in, Retry(in_=), Discard and on_dead, on the in-process worker and real Redis.
(on_dead through SIGKILLs of the filing worker: tests/worker/test_killed_mid_run.py.)"""

from __future__ import annotations

import pytest
from testapp import result_jobs as rj

from cogworker_django import Discard, JobFailed, Retry, job

from ..helpers import wait_until

POLL = 0.2  # the poller moves due retries this often in these tests


@pytest.fixture(autouse=True)
def project_limits(configure):
    configure(
        LIMITS={"test-pair": {"concurrency": 2}, "test-rate": {"rate": 3, "per": 2}},
        POLL_INTERVAL=POLL,
    )


def _times(r, prefix, name):
    return [float(t) for t in r.lrange(f"{prefix}:test:{name}", 0, -1)]


def test_retry_in_sets_the_wait_before_each_retry(cogworker_worker, r, prefix):
    ref = rj.retries_in_a_second.enqueue("a")
    cogworker_worker(concurrency=1)
    assert ref.result(timeout=20) == "third time"
    first, second, third = _times(r, prefix, "retry-times:a")
    for a, b in ((first, second), (second, third)):
        assert 1.0 <= b - a <= 1.0 + POLL + 1.5, (a, b)


def test_raise_retry_in_sets_the_wait_and_counts_an_attempt(cogworker_worker, r, prefix):
    ref = rj.asks_retry_in.enqueue("b", 2)
    cogworker_worker(concurrency=1)
    seen = wait_until(lambda: r.zrange(f"{prefix}:retry", 0, -1, withscores=True), 10)
    ((raw, at),) = seen
    assert '"retry_count":1' in raw and '"error_class":"cogworker_django.core.retry.Retry"' in raw
    assert ref.status() == "retrying" and ref.state == "RETRY"
    assert ref.result(timeout=20) == "retried"
    first, second = _times(r, prefix, "ask-times:b")
    assert 2.0 <= second - first <= 2.0 + POLL + 1.5
    assert abs(at - (first + 2.0)) < 1.0


def test_retry_past_the_count_goes_to_dead(cogworker_worker, r, prefix):
    ref = rj.asks_retry_forever.enqueue("c")
    cogworker_worker(concurrency=1)
    with pytest.raises(JobFailed) as failed:
        ref.result(timeout=20)
    assert failed.value.status == "dead"
    assert len(_times(r, prefix, "forever:c")) == 2  # retry=1: one retry, then dead


def test_retry_on_sends_another_error_to_dead_at_once(cogworker_worker, r, prefix):
    bug = rj.only_network_errors.enqueue("bug", "value")
    net = rj.only_network_errors.enqueue("net", "connection")
    cogworker_worker(concurrency=2)
    with pytest.raises(JobFailed) as failed:
        bug.result(timeout=10)
    assert failed.value.error_class == "ValueError"
    assert len(_times(r, prefix, "network:bug")) == 1  # never retried
    with pytest.raises(JobFailed):
        net.result(timeout=30)
    assert len(_times(r, prefix, "network:net")) == 6  # retry=5: retried every time


def test_discard_stops_without_retry_or_dead(cogworker_worker, r, prefix):
    ref = rj.discards.enqueue("account gone")
    cogworker_worker(concurrency=1)
    with pytest.raises(JobFailed) as failed:
        ref.result(timeout=10)
    assert failed.value.status == "discarded" and "account gone" in failed.value.message
    assert ref.status() == "discarded" and ref.state == "IGNORED"
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    from cogworker_django.api import History

    wait_until(lambda: History().runs_of(str(ref), 5), 15, message="history flushed")
    (run,) = History().runs_of(str(ref), 5)
    assert run.status == "discarded" and "account gone" in (run.error_message or "")


def test_a_callable_retry_in_gets_the_attempt(cogworker_worker, r, prefix):
    ref = rj.callable_retry_in.enqueue("d")
    cogworker_worker(concurrency=1)
    with pytest.raises(JobFailed):
        ref.result(timeout=20)
    t = _times(r, prefix, "callable:d")
    assert len(t) == 4
    assert t[1] - t[0] <= POLL + 1.0  # attempt 1: 0 s
    assert 1.0 <= t[2] - t[1] <= 1.0 + POLL + 1.5  # attempt 2: 1 s


def test_a_hostile_retry_in_falls_back_to_the_default_backoff(
    cogworker_worker, r, prefix, caplog, configure
):
    configure(RETRY_BACKOFF="testapp.jobs.fast_backoff")
    ref = rj.hostile_retry_in.enqueue("e")
    cogworker_worker(concurrency=1)
    with pytest.raises(JobFailed):
        ref.result(timeout=20)
    assert len(_times(r, prefix, "hostile:e")) == 2
    assert any("retry_in failed" in rec.getMessage() for rec in caplog.records)


def test_on_dead_is_enqueued_once_with_the_dead_jid(cogworker_worker, r, prefix):
    ref = rj.sync_account.enqueue(7)
    cogworker_worker(concurrency=1)
    wait_until(lambda: r.lrange(f"{prefix}:test:alerts", 0, -1), 10)
    ((message, dead, _own),) = [a.split("|") for a in r.lrange(f"{prefix}:test:alerts", 0, -1)]
    assert (message, dead) == ("sync failed", str(ref))
    assert ref.status() == "dead"


def _undecorated():
    """A module-level function each bad decoration is tried on (each raises first)."""


def test_options_are_checked_at_decoration_time():
    with pytest.raises(TypeError, match="retry_on"):
        job(retry_on="ValueError")(_undecorated)
    with pytest.raises(ValueError, match="retry_in"):
        job(retry_in=[1, -2])(_undecorated)
    with pytest.raises(ValueError, match="retry_in"):
        job(retry_in=float("nan"))(_undecorated)
    with pytest.raises(TypeError, match="on_dead"):
        job(on_dead="testapp.result_jobs.alert")(_undecorated)
    with pytest.raises(TypeError, match="dead_jid"):
        job(on_dead=rj.add.s(1))(_undecorated)
    with pytest.raises(TypeError, match="only be given to @job"):
        rj.add.using(retry_on=ValueError)
    with pytest.raises(ValueError, match="Retry"):
        Retry(in_=float("inf"))
    assert str(Discard("why")) == "why"
    with pytest.raises(ValueError, match="result_ttl"):
        job(result_ttl=-1)(_undecorated)
