"""expires_in through a real (in-process) worker: a job not started by its deadline is dropped when
taken (never run, acked, logged, recorded as expired); one taken in time runs; a job
scheduled for later expires that long after its run time."""

from __future__ import annotations

import json
import time

from testapp import jobs as tj

from ..helpers import wait_until


def runs(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def history(r, prefix) -> list[dict]:
    return [json.loads(fields["run"]) for _id, fields in r.xrange(f"{prefix}:history")]


def test_a_job_past_its_expiry_is_dropped_unrun(inworker, worker_log, r, prefix):
    jid = tj.expiring.enqueue("late")
    [raw] = r.lrange(f"{prefix}:queue:default", 0, -1)
    expires_at = json.loads(raw)["expires_at"]
    wait_until(lambda: time.time() > expires_at + 0.1, 10, message="its expiry to pass")
    w = inworker()
    worker_log.wait_for_log(rf"expiring \(jid {jid}\) expired", timeout=15)
    tj.record.enqueue("after")
    wait_until(lambda: runs(r, prefix).get("after") == 1, 15, message="a job after it")
    assert "late" not in runs(r, prefix)
    # "after" counts its run before its ack lands: wait for the acks, so that an expired
    # job left in progress (never acked) is what fails here, not the race with the ack.
    wait_until(
        lambda: not any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*")),
        10,
        message="both jobs acked",
    )
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    w.stop()
    assert [run["status"] for run in history(r, prefix) if run["jid"] == jid] == ["expired"]
    assert worker_log.log().count(f"(jid {jid}) expired") == 1  # logged once


def test_a_job_taken_in_time_runs(inworker, r, prefix):
    w = inworker()
    tj.expiring.enqueue("in-time")
    wait_until(lambda: runs(r, prefix).get("in-time") == 1, 15, message="the job to run")
    w.stop()


def test_a_scheduled_job_expires_from_its_run_time():
    before = time.time()
    job = tj.expiring._build(("x",), {}, at=before + 300)
    assert job["expires_at"] >= before + 302
    now_job = tj.expiring._build(("x",), {})
    assert before + 2 <= now_job["expires_at"] <= time.time() + 2
