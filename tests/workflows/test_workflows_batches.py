"""Batches on a real Redis, without a worker: members counted by the push that pushes
them, refused pushes that count nothing, and the bookkeeping script (lua/batch_update.lua)
idempotent per jid, pushing each callback once."""

from __future__ import annotations

import json

import pytest
from django.db import transaction
from testapp import jobs as tj

from cogworker_django import Batch, BatchFinished, BatchNotFound, api
from cogworker_django.core import client, payload
from cogworker_django.core.middleware import Reschedule
from cogworker_django.store import keys
from cogworker_django.workflows import store
from cogworker_django.workflows.middleware import BatchMiddleware


def queued(r, queue="default"):
    return [json.loads(raw) for raw in r.lrange(f"{keys.prefix()}:queue:{queue}", 0, -1)]


def pending(r, bid):
    return r.smembers(keys.batch_pending(bid))


def run_in_worker(job, fn=lambda: "ok"):
    """What a worker's server chain does with ``job`` around ``fn`` (the job itself)."""
    return BatchMiddleware()(job, job["queue"], fn)


def test_members_are_counted_by_the_push_that_pushes_them(r, prefix):
    with Batch(description="rows", on_success=tj.wf_callback.s("ok")) as batch:
        one = tj.wf_member.enqueue("a")
        many = tj.wf_member.enqueue_many(["b", "c"])
        later = tj.wf_member.enqueue_in(60, "d")
        assert r.hget(keys.batch(batch.bid), "blocks") == "1"
    jids = [one, *many, later]
    assert pending(r, batch.bid) == set(jids)
    assert r.lrange(keys.batch_jids(batch.bid), 0, -1) == jids
    assert {j["bid"] for j in queued(r)} == {batch.bid}
    (scheduled,) = r.zrange(keys.schedule(keys.home_of("default")), 0, -1)
    assert json.loads(scheduled)["bid"] == batch.bid
    status = api.Batches().get(batch.bid)
    assert (status.total, status.pending, status.open_blocks, status.state) == (4, 4, 0, "running")
    assert status.description == "rows"
    assert status.on_success == "testapp.jobs.wf_callback.s('ok')"
    assert 0 < status.expires_in <= 30 * 86400


def test_a_refused_push_counts_nothing_and_a_counted_job_is_always_pushed(r, prefix):
    batch = Batch()
    with batch:
        pass  # created (and already succeeded: it was empty)
    with pytest.raises(BatchFinished):
        Batch.reopen(batch.bid).add(tj.wf_member.s("late"))
    assert queued(r) == []

    batch = Batch()
    with batch:
        tj.wf_member.enqueue("first")
        r.delete(keys.queue("default"))
        r.set(keys.queue("default"), "not a list")  # the queue of the wrong type
        with pytest.raises(Exception, match="WRONGTYPE"):
            tj.wf_member.enqueue("refused")
        with pytest.raises(Exception, match="WRONGTYPE"):
            tj.wf_member.enqueue_many(["refused too", "and this"])
    assert len(pending(r, batch.bid)) == 1  # only the one that went in

    with pytest.raises(BatchNotFound):
        Batch.reopen("nosuchbatch").add(tj.wf_member.s("x"))


def test_a_batch_key_of_the_wrong_type_refuses_the_push_whole(r, prefix):
    batch = Batch()
    with batch:
        r.set(keys.batch_pending(batch.bid), "oops")
        with pytest.raises(Exception, match="WRONGTYPE"):
            tj.wf_member.enqueue("a")
        assert queued(r) == []  # nothing pushed that is not counted
        r.delete(keys.batch_pending(batch.bid))


def test_a_member_pushed_onto_an_empty_queue_rings_its_doorbell(r, prefix):
    # As an ordinary push does (store/bell.py): an idle worker starts it at once,
    # not at the end of its wait (FETCH_IDLE_MAX_INTERVAL). Once per list found empty;
    # a scheduled member waits in the schedule and rings nothing.
    with Batch():
        tj.wf_member.enqueue("a")
        tj.wf_member.enqueue_many(["b", "c"])
        tj.wf_member.using(queue="low").enqueue_in(60, "d")
    assert r.llen(keys.bell("default")) == 1
    assert r.llen(keys.bell("low")) == 0
    with Batch():
        tj.wf_member.using(queue="low").enqueue_many(["e", "f"])
    assert r.llen(keys.bell("low")) == 1 and len(queued(r, "low")) == 2


def test_a_bulk_push_refused_for_one_batch_pushes_and_counts_the_rest(r, prefix):
    """One bulk push of members of two batches and a job of none, one batch's key of
    the wrong type: a BulkPushError names exactly the job not pushed; the job of no
    batch and the other batch's member are queued, and that member is counted."""
    ok, bad = Batch(), Batch()
    with ok:
        tj.wf_member.enqueue("ok-0")
    with bad:
        tj.wf_member.enqueue("bad-0")
    r.delete(keys.queue("default"))
    r.delete(keys.batch_pending(bad.bid))
    r.set(keys.batch_pending(bad.bid), "oops")
    jobs = [
        tj.wf_member.s("ok-1").build(bid=ok.bid),
        payload.build("testapp.jobs.record", ["plain"], queue="default"),
        tj.wf_member.s("bad-1").build(bid=bad.bid),
    ]
    with pytest.raises(client.BulkPushError, match="WRONGTYPE") as refused:
        client.push_many(jobs)
    assert refused.value.results == [jobs[0]["jid"], jobs[1]["jid"], None]
    assert sorted(j["jid"] for j in queued(r)) == sorted([jobs[0]["jid"], jobs[1]["jid"]])
    assert len(pending(r, ok.bid)) == 2


def test_success_is_recorded_once_per_jid_and_fires_each_callback_once(r, prefix):
    with Batch(on_success=tj.wf_callback.s("ok"), on_complete=tj.wf_callback.s("done")) as b:
        tj.wf_member.enqueue_many(["a", "b"])
    a, b_ = queued(r)[::-1]
    r.delete(keys.queue("default"))
    assert run_in_worker(a) == "ok"
    assert queued(r) == []  # one member left: nothing fired
    for _ in range(3):  # the same jid delivered again (recovered, handed over): nothing
        run_in_worker(a)
    assert pending(r, b.bid) == {b_["jid"]}
    run_in_worker(b_)
    fired = queued(r)
    assert sorted(j["callback_event"] for j in fired) == ["complete", "success"]
    assert all(j["callback_of"] == b.bid and "bid" not in j for j in fired)
    run_in_worker(b_)
    run_in_worker(a)
    assert len(queued(r)) == 2
    status = api.Batches().get(b.bid)
    assert status.state == "succeeded" and status.succeeded == 2
    assert {status.complete_jid, status.success_jid} == {j["jid"] for j in fired}
    assert 0 < r.ttl(keys.batch(b.bid)) <= 7 * 86400  # BATCH_TTL from now on


def test_on_complete_fires_after_a_failure_on_success_waits_for_the_retry(r, prefix):
    with Batch(on_success=tj.wf_callback.s("ok"), on_complete=tj.wf_callback.s("done")) as b:
        tj.wf_member.enqueue_many(["a", "b"])
    a, b_ = queued(r)[::-1]
    r.delete(keys.queue("default"))
    run_in_worker(a)

    def boom():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        run_in_worker(b_, boom)
    assert [j["callback_event"] for j in queued(r)] == ["complete"]
    (failure,) = api.Batches().get(b.bid).failures
    assert (failure.jid, failure.error_class, failure.dead) == (b_["jid"], "RuntimeError", False)
    with pytest.raises(RuntimeError):  # fails again: counted once, on_complete not again
        run_in_worker({**b_, "retry_count": 1}, boom)
    assert len(queued(r)) == 1
    run_in_worker({**b_, "retry_count": 2})
    assert sorted(j["callback_event"] for j in queued(r)) == ["complete", "success"]
    status = api.Batches().get(b.bid)
    assert status.failed_jobs == 1 and status.failures == () and status.state == "succeeded"


def test_a_reschedule_is_not_an_outcome(r, prefix):
    with Batch(on_complete=tj.wf_callback.s("done")) as b:
        tj.wf_member.enqueue("a")
    (a,) = queued(r)

    def later():
        raise Reschedule(5)

    with pytest.raises(Reschedule):
        run_in_worker(a, later)
    assert pending(r, b.bid) == {a["jid"]} and r.scard(keys.batch_waiting(b.bid)) == 1


def test_a_success_redis_cannot_take_is_rescheduled_not_lost(r, prefix, monkeypatch):
    with Batch(on_success=tj.wf_callback.s("ok")) as b:
        tj.wf_member.enqueue("a")
    (a,) = queued(r)
    monkeypatch.setattr(store, "PATIENCE", 0.2)

    def away(*args, **kwargs):
        import redis

        raise redis.ConnectionError("Redis is away")

    monkeypatch.setattr(store, "update", away)
    with pytest.raises(Reschedule):
        run_in_worker(a)
    monkeypatch.undo()
    assert pending(r, b.bid) == {a["jid"]}
    run_in_worker(a)  # the rescheduled run: recorded now
    assert [j["callback_event"] for j in queued(r)[:1]] == ["success"]


@pytest.mark.django_db(transaction=True)
def test_jobs_enqueued_on_commit_join_and_the_block_closes_after_them(r, prefix):
    with transaction.atomic():
        with Batch(on_success=tj.wf_callback.s("ok")) as b:
            tj.wf_member.using(on_commit=True).enqueue("a")
        assert r.hget(keys.batch(b.bid), "blocks") == "1"  # waits for the commit
        assert queued(r) == []
    assert r.hget(keys.batch(b.bid), "blocks") == "0"
    (a,) = queued(r)
    assert a["bid"] == b.bid and pending(r, b.bid) == {a["jid"]}


def test_a_return_value_json_cannot_hold_fails_a_group_member(r, prefix):
    from cogworker_django import group

    batch = group(tj.wf_not_json.s()).enqueue(then=tj.wf_callback.s().with_results())
    (member,) = queued(r)
    with pytest.raises(Exception, match="must be JSON"):
        run_in_worker(member, lambda: {1, 2})
    assert api.Batches().get(batch.bid).failed_jobs == 1


def test_unique_jobs_cannot_join(r, prefix):
    from cogworker_django import WorkflowError

    with Batch():
        with pytest.raises(WorkflowError, match="unique"):
            tj.wf_member.using(unique="until_executed").enqueue("u")
    with pytest.raises(WorkflowError, match="unique"):
        Batch(on_success=tj.wf_member.using(unique="until_executed").s("u"))


def test_results_are_kept_only_when_a_callback_asks(r, prefix):
    from cogworker_django import group

    plain = group(tj.wf_square.s(2)).enqueue(then=tj.wf_callback.s())
    wanting = group(tj.wf_square.s(3)).enqueue(then=tj.wf_callback.s().with_results())
    for job in queued(r)[::-1]:
        run_in_worker(job, lambda job=job: job["args"][0] ** 2)
    assert not r.exists(keys.batch_results(plain.bid))
    assert store.results(wanting.bid) == [9]
    then = [j for j in queued(r) if j.get("results_of")]
    assert [j["callback_of"] for j in then] == [wanting.bid]
    seen = []
    run_in_worker(then[0], lambda: seen.append(list(then[0]["args"])))
    assert seen == [[[9]]] and then[0]["args"] == []  # the payload keeps its own arguments


def test_payload_of_a_member_names_its_batch_and_nothing_else_changes(r, prefix):
    with Batch() as b:
        tj.wf_member.enqueue(2**60 + 1)
    (job,) = queued(r)
    assert job["args"] == [2**60 + 1] and job["bid"] == b.bid
    assert set(job) == set(payload.build("x")) | {"bid"}


def test_a_member_that_leaves_without_a_run_counts_as_failed(r, prefix):
    """Deleted by an operator (or dead as a poison job): departures tell the batch."""
    with Batch(on_success=tj.wf_callback.s("ok"), on_complete=tj.wf_callback.s("done")) as b:
        tj.wf_member.enqueue("now")
        later = tj.wf_member.enqueue_in(3600, "later")
    (now,) = queued(r)
    r.delete(keys.queue("default"))
    run_in_worker(now)
    assert queued(r) == []
    scheduled = api.ScheduledSet()
    (record,) = scheduled.page(0, 10)
    scheduled.delete(record)
    assert [j["callback_event"] for j in queued(r)] == ["complete"]
    status = api.Batches().get(b.bid)
    (failure,) = status.failures
    assert (failure.jid, failure.dead, status.state) == (later, True, "stopped")
    assert "deleted" in failure.error_message


def test_the_key_guard_knows_the_keys_of_recent_batches(r, prefix):
    from cogworker_django.worker import keyguard

    with Batch() as b:
        tj.wf_member.enqueue("a")
    r.delete(keys.batch_waiting(b.bid))
    r.set(keys.batch_waiting(b.bid), "oops")
    expected = keyguard.expected_types(r)
    assert expected[keys.batch(b.bid)] == "hash"
    assert expected[keys.batch_jids(b.bid)] == "list"
    assert expected[keys.batches()] == "zset"
    assert keyguard.check(r) == [keys.batch_waiting(b.bid)]
    assert r.type(keys.batch_waiting(b.bid)) == "none"


def test_the_listing_forgets_batches_that_have_expired(r, prefix, configure):
    with Batch() as old:
        tj.wf_member.enqueue("a")
    r.delete(*keys.batch_keys(old.bid))  # expired
    assert api.Batches().list() == [] and r.zcard(keys.batches()) == 0  # dropped on sight
    configure(BATCH_TTL=10, BATCH_UNFINISHED_TTL=10)
    r.zadd(keys.batches(), {"long-gone": 1.0})
    with Batch():
        pass
    assert r.zscore(keys.batches(), "long-gone") is None  # pruned by a new batch


def test_a_cancelled_member_is_filed_in_dead_and_its_retry_finishes_the_batch(r, prefix):
    """Cancelled while queued: it counts as failed (on_complete fires, the batch is
    stopped) and is in the dead set, so retrying it by hand lets on_success fire."""
    with Batch(on_success=tj.wf_callback.s("ok"), on_complete=tj.wf_callback.s("done")) as b:
        doomed = tj.wf_member.enqueue("cancelled")
        tj.wf_member.enqueue("runs")
    assert api.cancel(doomed) == "queue"
    (other,) = queued(r)
    r.delete(keys.queue("default"))
    run_in_worker(other)
    assert [j["callback_event"] for j in queued(r)] == ["complete"]
    status = api.Batches().get(b.bid)
    (failure,) = status.failures
    assert (failure.jid, failure.dead, failure.error_class, status.state) == (
        doomed,
        True,
        "JobCancelled",
        "stopped",
    )
    record = api.DeadSet().find(doomed)
    assert record.job["error_class"] == "JobCancelled" and record.job["bid"] == b.bid
    r.delete(keys.queue("default"))
    assert api.DeadSet().retry(record).name == "DONE"
    (again,) = queued(r)
    assert again["jid"] == doomed
    r.delete(keys.queue("default"))
    run_in_worker(again)
    assert [j["callback_event"] for j in queued(r)] == ["success"]
    assert api.Batches().get(b.bid).state == "succeeded"


def test_a_job_in_no_batch_is_not_filed_in_dead_when_cancelled(r, prefix):
    jid = tj.wf_member.enqueue("alone")
    assert api.cancel(jid) == "queue"
    assert api.DeadSet().size() == 0
