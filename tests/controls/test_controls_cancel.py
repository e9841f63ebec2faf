"""Cancellation in each state, through api.cancel and real (in-process) workers: queued, scheduled and
retrying jobs removed (locks released, a django.tasks result FAILED); a running job that
checks cancelled() stops with JobCancelled and one that never checks is interrupted
after CANCEL_GRACE, neither retried nor in dead, both in history as cancelled; a job
that finished meanwhile, or never existed, is a no-op that says so (None)."""

from __future__ import annotations

import json
import time

import pytest
from testapp import jobs as tj

from cogworker_django import api
from cogworker_django.core import payload

from ..helpers import wait_until


def runs(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def history(r, prefix) -> list[dict]:
    return [json.loads(fields["run"]) for _id, fields in r.xrange(f"{prefix}:history")]


def acked(r, prefix) -> bool:
    """Nothing on an in-progress list: every job taken was acked (or filed)."""
    return not any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*"))


def test_cancel_a_queued_job_releases_its_unique_lock(r, prefix):
    jid = tj.record.using(unique="until_executed").enqueue("u")
    [lock] = r.keys(f"{prefix}:unique:*")
    assert api.cancel(jid) == "queue"
    assert r.llen(f"{prefix}:queue:default") == 0
    assert not r.exists(lock)
    assert api.cancel(jid) is None  # gone: a second cancel says so


def test_cancel_a_scheduled_job(r, prefix):
    jid = tj.record.enqueue_in(300, "later")
    assert api.cancel(jid) == "scheduled"
    assert r.zcard(f"{prefix}:schedule") == 0


def test_cancel_a_retrying_job(r, prefix):
    job = tj.record._build(("again",), {})
    job["retry_count"] = 1
    r.zadd(f"{prefix}:retry", {payload.encode(job): time.time() + 300})
    assert api.cancel(job["jid"]) == "retry"
    assert r.zcard(f"{prefix}:retry") == 0


def test_cancel_of_an_unknown_or_finished_job_is_none(inworker, r, prefix):
    assert api.cancel("0123456789abcdef01234567") is None
    jid = tj.record.enqueue("done")
    w = inworker()
    wait_until(lambda: runs(r, prefix).get("done") == 1, 15, message="the job to run")
    # Its ack rides with the worker's next fetch: until then it is still listed.
    wait_until(
        lambda: not any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*")),
        10,
        message="the job acked",
    )
    assert api.cancel(jid) is None
    w.stop()
    with pytest.raises(ValueError):
        api.cancel("not a jid")


def test_a_running_job_that_checks_sees_cancelled_and_stops(inworker, worker_log, r, prefix):
    jid = tj.cooperative_cancel.enqueue("coop")
    w = inworker(concurrency=2)
    wait_until(lambda: runs(r, prefix).get("coop") == 1, 15, message="the job to start")
    wait_until(lambda: api.cancel(jid) == "running", 10, message="cancel to find it running")
    wait_until(lambda: runs(r, prefix).get("coop-saw-cancel"), 10, message="cancelled() True")
    worker_log.wait_for_log(r"cooperative_cancel \(jid \w+\) cancelled")
    wait_until(lambda: acked(r, prefix), 10, message="the cancelled job acked")
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    assert runs(r, prefix)["coop"] == 1  # not retried
    w.stop()
    (run,) = [run for run in history(r, prefix) if run["jid"] == jid]
    assert run["status"] == "cancelled", run
    assert not r.zscore(f"{prefix}:cancels", jid)


def test_a_running_job_that_never_checks_is_interrupted_after_the_grace(
    inworker, worker_log, r, prefix
):
    grace = 2.0
    jid = tj.ignores_cancel.enqueue("deaf")
    w = inworker(concurrency=1, settings={"CANCEL_GRACE": grace})
    wait_until(lambda: runs(r, prefix).get("deaf") == 1, 15, message="the job to start")
    asked = []  # when each cancel was sent: the last one found it running

    def cancel() -> bool:
        asked.append(time.time())
        return api.cancel(jid) == "running"

    wait_until(cancel, 10, message="cancel to find it running")
    worker_log.wait_for_log(r"ignores_cancel \(jid \w+\) cancelled: interrupting it", timeout=15)
    worker_log.wait_for_log(r"ignores_cancel \(jid \w+\) cancelled: JobCancelled", timeout=15)
    # The interruption came no sooner than CANCEL_GRACE after the cancel (the job's own
    # clock: the worker can only have been told after the cancel was sent).
    interrupted = float(r.hget(tj.times_key(), "deaf:interrupted"))
    assert interrupted - asked[-1] >= grace, (interrupted - asked[-1], grace)
    # ... and within a generous bound after it (the first cancel sent found it running).
    assert interrupted - asked[0] <= grace + 5.0, (interrupted - asked[0], grace)
    # Filed nowhere, once the worker has acked it.
    wait_until(lambda: acked(r, prefix), 10, message="the cancelled job acked")
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    tj.record.enqueue("next")
    wait_until(lambda: runs(r, prefix).get("next") == 1, 15, message="the next job")
    w.stop()
    assert runs(r, prefix)["deaf"] == 1
    (run,) = [run for run in history(r, prefix) if run["jid"] == jid]
    assert run["status"] == "cancelled", run
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    assert not r.zscore(f"{prefix}:cancels", jid)


def test_cancelling_a_queued_task_fails_its_result(r, prefix):
    pytest.importorskip("django.tasks")
    from django.tasks import TaskResultStatus
    from testapp import tasks as tt

    result = tt.add.enqueue(1, 2)
    assert api.cancel(result.id) == "queue"
    assert tt.add.get_result(result.id).status == TaskResultStatus.FAILED


def test_cancel_a_job_waiting_with_a_priority(r, prefix):
    from cogworker_django.core import client

    job = payload.build("testapp.jobs.noop", [], queue="default", priority=5)
    client.push(job)
    assert r.zcard(f"{prefix}:pqueue:default") == 1
    assert api.cancel(job["jid"]) == "queue"
    assert r.zcard(f"{prefix}:pqueue:default") == 0
