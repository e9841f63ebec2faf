"""Time limits across real workers: a pure-Python loop interrupted with JobTimeout and
filed; a job stuck in a C call abandoned after TIMEOUT_GRACE (its thread replaced, the
job filed once, the worker running others and exiting cleanly at TERM); an async job
cancelled through its loop; DEFAULT_TIMEOUT; the options checked."""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from testapp import jobs as tj

from cogworker_django import CogworkerError, JobCancelled, JobTimeout, api
from cogworker_django.controls import options

from ..helpers import wait_until


def runs(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def dead_jobs(r, prefix) -> list[dict]:
    return [json.loads(m) for m in r.zrange(f"{prefix}:dead", 0, -1)]


def history_of(prefix, status):
    return [run for run in api.History().query(status=status) if run]


def test_a_busy_loop_is_interrupted_and_filed(worker, r, prefix):
    jid = tj.spin_forever.enqueue()
    w = worker(settings={"CONCURRENCY": 2})
    wait_until(lambda: dead_jobs(r, prefix), 20, message="the timed-out job in dead")
    [dead] = dead_jobs(r, prefix)
    assert dead["jid"] == jid
    assert dead["error_class"].endswith("JobTimeout")
    assert "ran past its timeout of 1 s" in dead["error_message"]
    # When it landed, on the job's own clock: at its timeout of 1 s (less up to 0.2 s
    # for the moment between the deadline's arming and the job's first line, where it
    # stamps its start: a few ms, more on a loaded machine), within a generous bound
    # after it. The message above is a template, not a measurement.
    times = r.hgetall(tj.times_key())
    took = float(times[f"{jid}:interrupted"]) - float(times[f"{jid}:started"])
    assert 1.0 - 0.2 <= took <= 1.0 + 5.0, took
    # Interrupted, not abandoned: the same thread goes on running jobs.
    assert "abandoned" not in w.log()
    tj.record.enqueue("after")
    wait_until(lambda: runs(r, prefix).get("after") == 1, 15, message="a job after it")
    assert w.stop() == 0
    statuses = {run["status"] for run in _history(r, prefix)}
    assert "timeout" in statuses


@pytest.mark.parametrize("func", ["spin_then_finally_raises", "async_finally_raises"])
def test_a_finally_that_raises_after_a_timeout_is_filed_as_the_timeout(worker, r, prefix, func):
    """The run ended by its time limit: filed as JobTimeout (and recorded as "timeout"),
    the finally's error named with it, not filed as that error's failure."""
    jid = getattr(tj, func).enqueue()
    w = worker()
    wait_until(lambda: dead_jobs(r, prefix), 20, message="the timed-out job in dead")
    [dead] = dead_jobs(r, prefix)
    assert dead["jid"] == jid and dead["error_class"].endswith("JobTimeout"), dead
    assert "ran past its timeout of 1 s" in dead["error_message"]
    assert "then, while it unwound the job: RuntimeError:" in dead["error_message"]
    assert "cleanup failed" in dead["traceback"]
    assert w.stop() == 0
    [run] = [x for x in _history(r, prefix) if x["jid"] == jid]
    assert run["status"] == "timeout"


def _history(r, prefix) -> list[dict]:
    return [json.loads(fields["run"]) for _id, fields in r.xrange(f"{prefix}:history")]


def test_a_job_stuck_in_c_is_abandoned_and_the_worker_goes_on(worker, r, prefix):
    jid = tj.sleep_in_c.enqueue(60)
    w = worker(settings={"CONCURRENCY": 1, "TIMEOUT_GRACE": 1.0})
    wait_until(lambda: dead_jobs(r, prefix), 30, message="the stuck job filed in dead")
    [dead] = dead_jobs(r, prefix)
    assert dead["jid"] == jid and dead["error_class"].endswith("JobTimeout")
    assert "abandoned" in dead["error_message"]
    # Acked: off the in-progress list; the slot has a fresh thread that runs others.
    assert not any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*"))
    tj.record.enqueue_many([(f"next-{i}",) for i in range(5)])
    wait_until(
        lambda: all(runs(r, prefix).get(f"next-{i}") == 1 for i in range(5)),
        20,
        message="jobs run by the replacement thread",
    )
    assert re.search(r"processor-0 abandoned and the job filed", w.log())
    # TERM: a clean exit although the stuck thread is still asleep.
    assert w.stop(30) == 0
    assert len(dead_jobs(r, prefix)) == 1
    assert r.llen(f"{prefix}:queue:default") == 0
    assert runs(r, prefix)[jid] == 1  # run once: neither requeued nor run again
    assert any(run["status"] == "timeout" for run in _history(r, prefix))


def test_an_abandoned_run_that_returns_later_settles_nothing(worker, r, prefix):
    """The stuck thread comes back (a 4 s sleep) after the watchdog filed its job: it must
    not ack, file or run anything more; the job stays filed once."""
    jid = tj.sleep_in_c.using(retry=1).enqueue(4)
    w = worker(settings={"CONCURRENCY": 1, "TIMEOUT_GRACE": 0.5, "RETRY_BACKOFF": None})
    wait_until(lambda: r.zcard(f"{prefix}:retry") == 1, 20, message="filed in retry")
    # When the sleep ends the pending JobTimeout lands at once: the thread comes back.
    w.wait_for_log(r"came back from its job after the watchdog abandoned it", timeout=20)
    # The JobTimeout pending since the watchdog raised it landed as the sleep returned:
    # not one more line of the job ran.
    assert "sleep_in_c-returned" not in runs(r, prefix)
    assert runs(r, prefix)[jid] == 1
    assert r.zcard(f"{prefix}:retry") == 1
    assert r.zcard(f"{prefix}:dead") == 0
    [retry] = [json.loads(m) for m in r.zrange(f"{prefix}:retry", 0, -1)]
    assert retry["jid"] == jid and retry["retry_count"] == 1
    tj.record.enqueue("still-running")
    wait_until(lambda: runs(r, prefix).get("still-running") == 1, 15, message="a later job")
    assert w.stop() == 0


def test_an_async_job_is_cancelled_through_its_loop(worker, r, prefix):
    tj.async_forever.enqueue()
    w = worker(settings={"CONCURRENCY": 1, "TIMEOUT_GRACE": 5.0})
    wait_until(lambda: dead_jobs(r, prefix), 20, message="the async job in dead")
    [dead] = dead_jobs(r, prefix)
    assert dead["error_class"].endswith("JobTimeout")
    assert "abandoned" not in dead["error_message"]
    assert "abandoned" not in w.log()
    assert w.stop() == 0


def test_default_timeout_applies_to_jobs_without_one(worker, r, prefix):
    tj.slow.using(retry=False).enqueue(30, "slow")
    tj.quick_with_timeout.enqueue("quick")
    w = worker(settings={"CONCURRENCY": 2, "DEFAULT_TIMEOUT": 1, "TIMEOUT_GRACE": 1.0})
    wait_until(lambda: dead_jobs(r, prefix), 30, message="the slow job timed out")
    assert dead_jobs(r, prefix)[0]["error_class"].endswith("JobTimeout")
    wait_until(lambda: runs(r, prefix).get("quick") == 1, 10, message="the quick job")
    assert w.stop() == 0


def test_timeout_options_are_checked():
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
        tj.noop.using(timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        tj.noop.using(timeout="10")
    with pytest.raises(ValueError, match="expires_in"):
        tj.noop.using(expires_in=-1)
    assert options.run_timeout({"timeout": 0}, 5.0) is None
    assert options.run_timeout({}, 5.0) == 5.0
    assert options.run_timeout({"timeout": 2}, None) == 2.0
    assert tj.noop.using(timeout=False)._build((), {})["timeout"] == 0


def test_default_timeout_setting_is_checked(configure):
    from cogworker_django import conf

    configure(DEFAULT_TIMEOUT=-3)
    with pytest.raises(ImproperlyConfigured, match="DEFAULT_TIMEOUT"):
        conf.get()


def test_the_job_controls_exceptions_are_cogworker_errors():
    for exc in (JobTimeout, JobCancelled):
        assert issubclass(exc, CogworkerError), exc.__mro__
    # Raised by the interpreter outside a run (no arguments, no run state): a text of
    # its own; a message given is kept.
    assert str(JobTimeout()) == "the job ran past its timeout"
    assert str(JobCancelled()) == "the job was cancelled"
    assert str(JobTimeout("too slow")) == "too slow"
    assert (JobTimeout.history_status, JobCancelled.history_status) == ("timeout", "cancelled")


def test_with_basic_fetch_a_stuck_job_is_filed_once_and_not_handed_over(worker, r, prefix):
    jid = tj.sleep_in_c.enqueue(60)
    w = worker(settings={"CONCURRENCY": 1, "TIMEOUT_GRACE": 1.0}, args=["--fetch", "basic"])
    wait_until(lambda: r.zcard(f"{prefix}:dead") == 1, 30, message="the stuck job filed")
    w.wait_for_log(r"processor-0 abandoned and the job filed")
    assert w.stop(30) == 0
    assert [j["jid"] for j in map(json.loads, r.zrange(f"{prefix}:dead", 0, -1))] == [jid]
    assert r.llen(f"{prefix}:queue:default") == 0  # not requeued at shutdown
    assert r.llen(f"{prefix}:unsettled") == 0


def test_the_settlement_is_claimed_once_between_a_run_and_the_watchdog():
    """Rule 15, on the ledger alone: whoever claims first settles; the other is refused."""
    from cogworker_django.worker.ledger import ABANDONED, Ledger, Work

    ledger = Ledger()
    stuck, other = Work("default", "same"), Work("default", "same")  # two copies of one payload
    ledger.fetch_out(1)
    ledger.fetched(1, [stuck, other])
    ledger.start(stuck, "processor-0")
    ledger.start(other, "processor-1")
    assert ledger.abandon(stuck) and stuck.state == ABANDONED
    assert not ledger.abandon(stuck)
    assert not ledger.performed(stuck)  # the stuck thread, back from its job
    ledger.left(stuck)  # no-op for it: the other copy is untouched
    assert ledger.performing() == ["same"] and len(ledger.running()) == 2
    ledger.settled(stuck)  # the watchdog filed it
    assert ledger.running() == [other]
    assert ledger.performed(other)  # the other copy settles itself
    assert not ledger.abandon(other)  # claimed: not the watchdog's any more
    ledger.succeeded(other)
    assert ledger.running() == [] and ledger.take_acks() == [other]
    late = Work("default", "late")
    ledger.start(late, "processor-0")
    assert ledger.begin_hand_over(0.1) == 0
    assert not ledger.abandon(late)  # the hand-over requeues it instead


def test_timeouts_and_cancels_have_their_own_metric_outcomes():
    from cogworker_django import JobCancelled
    from cogworker_django.observe import telemetry

    assert telemetry.failed_outcome({"retry": True}, JobTimeout()) == "timeout"
    assert telemetry.failed_outcome({"retry": True}, JobCancelled("x")) == "cancelled"
    assert telemetry.failed_outcome({"retry": True}, ValueError()) == "retry"
