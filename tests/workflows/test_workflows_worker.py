"""Workflows through real workers: batch callbacks once, after their members; chains
passing return values on through a retried step and resuming after a retry from dead;
groups with their results; a member run again after its worker died between its success
and its ack (or before the bookkeeping) fires nothing twice."""

from __future__ import annotations

import json

import pytest
from testapp import jobs as tj

from cogworker_django import Batch, JobFailed, api, chain, group
from cogworker_django.store import connection, keys
from cogworker_django.workflows.middleware import BatchMiddleware

from ..helpers import wait_until


def trace(r):
    return [json.loads(e) for e in r.lrange(f"{keys.prefix()}:test:wf", 0, -1)]


def callbacks(r, bid=None):
    return [e for e in trace(r) if e["kind"] == "callback" and bid in (None, e["callback_of"])]


def idle(r, prefix) -> bool:
    """Nothing left to run or running: the queue, the schedule and retry sets, the
    unsettled list and every in-progress list empty, read in one MULTI (a job is on an
    in-progress list from its fetch to its ack, and pushes its callbacks before the ack,
    so one snapshot with all of them empty has nothing still to come)."""
    lists = r.keys(f"{prefix}:inprogress:*")
    pipe = r.pipeline(transaction=True)
    home = keys.root()
    pipe.llen(keys.queue("default"))
    pipe.zcard(keys.schedule(home))
    pipe.zcard(keys.retry(home))
    pipe.llen(keys.unsettled(home))
    for name in lists:
        pipe.llen(name)
    return not any(pipe.execute())


def settle(r, prefix) -> None:
    """Wait until nothing is queued, due or in progress: a duplicate has come by then."""
    wait_until(lambda: idle(r, prefix), 30, message="nothing queued or in progress")


def test_batch_callbacks_run_once_after_their_members(inworker, r, prefix):
    tokens = [f"m{i}" for i in range(8)]
    with Batch(
        description="eight", on_success=tj.wf_callback.s("ok"), on_complete=tj.wf_callback.s("done")
    ) as batch:
        tj.wf_member.enqueue_many(tokens[:6])
        tj.wf_fail_first.enqueue("f1")  # fails once, succeeds on its retry
        tj.wf_member.enqueue_in(0.5, "later")
    inworker()
    wait_until(lambda: len(callbacks(r, batch.bid)) >= 2, 30, message="both callbacks")
    wait_until(lambda: api.Batches().get(batch.bid).state == "succeeded", 10, message="succeeded")
    settle(r, prefix)
    entries = trace(r)
    # Every run counted (a trace entry per run): a duplicate would be a third entry.
    runs = [(e["event"], i) for i, e in enumerate(entries) if e["kind"] == "callback"]
    assert sorted(event for event, _ in runs) == ["complete", "success"], runs
    fired = dict(runs)
    members = [i for i, e in enumerate(entries) if e["kind"] in ("member", "fail_first")]
    assert len(members) == 9  # 7 members, one of them twice
    assert fired["success"] > max(members)  # after the last run of a member
    first_failure = next(i for i, e in enumerate(entries) if e["kind"] == "fail_first")
    assert fired["complete"] > first_failure
    status = api.Batches().get(batch.bid)
    assert (status.total, status.succeeded, status.failed_jobs, status.failures) == (8, 8, 1, ())
    assert {status.complete_jid, status.success_jid} == {e["jid"] for e in callbacks(r, batch.bid)}
    assert [m.state for m in api.Batches().members(batch.bid)] == ["succeeded"] * 8
    assert api.Batches().list()[0].bid == batch.bid


def test_chain_of_five_passes_return_values_through_a_retried_step(inworker, r, prefix):
    batch = chain(
        tj.wf_add.s(1, 2),  # 3
        tj.wf_double_flaky.s("a"),  # 6, after one failure
        tj.wf_add.s(10),  # 16
        tj.wf_double_flaky.s("b"),  # 32, after one failure
        tj.wf_add.s(100),  # 132
    ).enqueue()
    inworker()
    wait_until(lambda: api.Batches().get(batch.bid).state == "succeeded", 30, message="the chain")
    adds = [(e["x"], e["y"]) for e in trace(r) if e["kind"] == "add"]
    assert adds == [(1, 2), (6, 10), (32, 100)]
    flaky = [(e["x"], e["tries"]) for e in trace(r) if e["kind"] == "double_flaky"]
    assert flaky == [(3, 1), (3, 2), (16, 1), (16, 2)]
    status = api.Batches().get(batch.bid)
    assert (status.kind, status.steps, status.step, status.total, status.succeeded) == (
        "chain",
        5,
        5,
        5,
        5,
    )


def test_a_chain_step_in_dead_stops_the_chain_and_its_retry_resumes_it(inworker, r, prefix):
    batch = chain(tj.wf_add.s(1, 1), tj.wf_dead_unless_fixed.s(), tj.wf_add.s(5)).enqueue()
    inworker()
    wait_until(lambda: api.Batches().get(batch.bid).state == "stopped", 30, message="stopped")
    status = api.Batches().get(batch.bid)
    assert (status.step, status.dead, status.succeeded) == (2, 1, 1)
    (failure,) = status.failures
    assert failure.dead and failure.error_class == "RuntimeError"
    assert [m.state for m in api.Batches().members(batch.bid)] == ["succeeded", "dead"]
    # The chain's reference is its last step's: stopped, it says so and names the step.
    assert batch.status() == "dead"
    with pytest.raises(JobFailed, match="the chain stopped at this step") as stopped:
        batch.result(timeout=3)
    assert stopped.value.jid == failure.jid
    assert [e["x"] for e in trace(r) if e["kind"] == "add"] == [1]
    connection.get_client().set(f"{prefix}:test:wf:fixed", "1")
    # The batch counts the step dead when it fails for good, just before the step is
    # filed in the dead set: wait for the filing.
    record = wait_until(lambda: api.DeadSet().find(failure.jid), 10, message="the dead step")
    assert record.job["args"] == [2]
    api.DeadSet().retry(record)
    wait_until(lambda: api.Batches().get(batch.bid).state == "succeeded", 30, message="resumed")
    assert [(e["x"], e["y"]) for e in trace(r) if e["kind"] == "add"] == [(1, 1), (2, 5)]
    assert batch.result(timeout=10) == 7  # the chain's final value


def test_group_then_runs_once_with_the_results_in_order(inworker, r, prefix):
    batch = group(*(tj.wf_square.s(i) for i in range(1, 11))).enqueue(
        then=tj.wf_callback.s("squares").with_results()
    )
    plain = group(tj.wf_square.s(7)).enqueue(then=tj.wf_callback.s("plain"))
    inworker()
    wait_until(lambda: len(callbacks(r)) >= 2, 30, message="both thens")
    settle(r, prefix)
    assert sorted(e["callback_of"] for e in callbacks(r)) == sorted([batch.bid, plain.bid])
    by_bid = {e["callback_of"]: e for e in callbacks(r)}
    assert by_bid[batch.bid]["args"] == [[i * i for i in range(1, 11)], "squares"]
    assert by_bid[plain.bid]["args"] == ["plain"]
    assert api.Batches().get(batch.bid).state == "succeeded"


def _orphan(r, prefix, raw):
    """Leave ``raw`` in the in-progress list of a process that is gone (it died)."""
    r.lpush(f"{prefix}:inprogress:deadhost:1:abc", raw)
    r.sadd(f"{prefix}:inprogress_ids", "deadhost:1:abc")


def test_a_member_recovered_after_its_bookkeeping_fires_nothing_again(
    inworker, worker_log, r, prefix
):
    """The worker died after the script recorded the success, before the ack: the job
    runs again (orphan recovery), its outcome is already counted."""
    with Batch(on_success=tj.wf_callback.s("ok")) as batch:
        tj.wf_member.enqueue("once")
    raw = r.rpop(keys.queue("default"))
    job = json.loads(raw)
    BatchMiddleware()(job, "default", lambda: "once")  # ran, recorded: callback pushed
    _orphan(r, prefix, raw)
    inworker()
    worker_log.wait_for_log(r"recovered 1 job\(s\) from dead process", timeout=30)
    wait_until(lambda: r.llen(f"{prefix}:inprogress:deadhost:1:abc") == 0, 10)
    wait_until(
        lambda: [e["token"] for e in trace(r) if e["kind"] == "member"] == ["once"],
        20,
        message="the member's second run",
    )
    wait_until(lambda: len(callbacks(r, batch.bid)) >= 1, 10, message="the callback")
    settle(r, prefix)
    assert len(callbacks(r, batch.bid)) == 1
    assert [e["token"] for e in trace(r) if e["kind"] == "member"] == ["once"]


def test_a_member_recovered_before_its_bookkeeping_fires_its_callback_once(
    inworker, worker_log, r, prefix
):
    """The worker died before the script ran (during or right after the run)."""
    with Batch(on_success=tj.wf_callback.s("ok"), on_complete=tj.wf_callback.s("done")) as b:
        tj.wf_member.enqueue_many(["x", "y"])
    raw = r.rpop(keys.queue("default"))
    _orphan(r, prefix, raw)
    inworker()
    worker_log.wait_for_log(r"recovered 1 job\(s\) from dead process", timeout=30)
    wait_until(lambda: len(callbacks(r, b.bid)) >= 2, 20, message="the callbacks")
    settle(r, prefix)
    assert api.Batches().get(b.bid).state == "succeeded"
    assert sorted(e["event"] for e in callbacks(r, b.bid)) == ["complete", "success"]


def test_a_django_task_enqueued_in_a_block_is_a_member(inworker, r, prefix):
    import pytest

    pytest.importorskip("django.tasks")  # Django 6.0+; a broken testapp.tasks is an error
    from testapp import tasks

    with Batch(on_success=tj.wf_callback.s("tasks")) as batch:
        result = tasks.add.enqueue(2, 3)
        tj.wf_member.enqueue("job")
    assert result.id in r.smembers(keys.batch_pending(batch.bid))
    inworker()
    wait_until(lambda: len(callbacks(r, batch.bid)) >= 1, 30, message="on_success")
    settle(r, prefix)
    assert len(callbacks(r, batch.bid)) == 1
    assert api.Batches().get(batch.bid).succeeded == 2


def test_an_expired_member_counts_as_failed_and_its_retry_from_dead_finishes_the_batch(
    inworker, r, prefix
):
    """Expired before a worker took it: never run, counted as failed (on_complete fires),
    filed in dead ready to run (its expires_at dropped); retried from there, it runs and
    on_success fires."""
    with Batch(on_success=tj.wf_callback.s("ok"), on_complete=tj.wf_callback.s("done")) as b:
        late = tj.wf_member.using(expires_in=3600).enqueue("late")
        tj.wf_member.enqueue("on-time")
    queue = f"{prefix}:queue:default"
    for i, raw in enumerate(r.lrange(queue, 0, -1)):  # its hour passed, as if it had
        job = json.loads(raw)
        if job["jid"] == late:
            job["expires_at"] = 1.0
            r.lset(queue, i, json.dumps(job))
    inworker()
    wait_until(lambda: len(callbacks(r, b.bid)) == 1, 30, message="on_complete")
    assert callbacks(r, b.bid)[0]["event"] == "complete"
    assert [e["token"] for e in trace(r) if e["kind"] == "member"] == ["on-time"]
    record = wait_until(lambda: api.DeadSet().find(late), 10, message="the expired member")
    assert record.job["error_class"] == "JobExpired" and "expires_at" not in record.job
    assert api.Batches().get(b.bid).state == "stopped"
    api.DeadSet().retry(record)
    wait_until(lambda: api.Batches().get(b.bid).state == "succeeded", 30, message="finished")
    # The state turns when on_success is pushed; the callback runs a moment later.
    wait_until(lambda: len(callbacks(r, b.bid)) >= 2, 30, message="on_success ran")
    settle(r, prefix)
    assert sorted(e["event"] for e in callbacks(r, b.bid)) == ["complete", "success"]
