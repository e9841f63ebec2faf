"""Retry control from inside a job (core/retry.py, worker/failures.py): retry_on,
retry_in, Retry(in_=), Discard and on_dead, with real workers and real Redis."""

from __future__ import annotations

import signal

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


def test_on_dead_is_pushed_exactly_once_through_sigkills_of_the_filing_worker(worker, r, prefix):
    """Workers SIGKILLed at random moments while jobs die (some mid-run, some around the
    filing): every job ends in dead once and its on_dead job is pushed exactly once (the
    filing and the push are one script)."""
    import random
    import time

    n = 10
    jids = {str(rj.dies_slowly.enqueue(0.3)) for _ in range(n)}
    settings = {"MAX_ORPHANINGS": 1000, "CONCURRENCY": 3}
    rng = random.Random(46)
    kills = 0
    while r.zcard(f"{prefix}:dead") < n and kills < 10:
        w = worker(settings=settings)
        time.sleep(rng.uniform(0.1, 1.2))
        w.signal(signal.SIGKILL)
        w.wait(10)
        kills += 1
    w = worker(settings=settings)
    wait_until(lambda: r.zcard(f"{prefix}:dead") == n, 60, message="every job dead")
    wait_until(lambda: r.llen(f"{prefix}:test:alerts") >= n, 30, message="alerts")
    w.stop()
    alerts = r.lrange(f"{prefix}:test:alerts", 0, -1)
    # Each dead job pushed one on_dead job (one jid), no more; a run of it interrupted by
    # a kill may run again (at least once, as any job), with the same jid.
    pushed = {tuple(a.split("|")[1:]) for a in alerts}
    assert sorted(dead for dead, _own in pushed) == sorted(jids), (kills, alerts)
    assert kills >= 2  # the kills came while jobs ran


def test_a_job_that_keeps_killing_its_worker_gets_its_on_dead_from_recovery(worker, r, prefix):
    ref = rj.kills_its_worker.enqueue()
    settings = {"MAX_ORPHANINGS": 1}
    for _ in range(2):  # two runs kill their workers; the third start recovers it to dead
        w = worker(settings=settings)
        w.wait(30)
    w = worker(settings=settings)
    wait_until(lambda: r.lrange(f"{prefix}:test:alerts", 0, -1), 30, message="on_dead")
    w.stop()
    ((message, dead, _own),) = [a.split("|") for a in r.lrange(f"{prefix}:test:alerts", 0, -1)]
    assert (message, dead) == ("killer", str(ref))
    (raw,) = r.zrange(f"{prefix}:dead", 0, -1)
    assert '"error_class":"OrphanedTooOften"' in raw
