"""Workflows in the test modes: testing.fake() and testing.inline() keep batches in
memory and fire callbacks, chain steps and group thens as drain() finishes the members."""

from __future__ import annotations

import pytest
from testapp import jobs as tj

from cogworker_django import Batch, WorkflowError, chain, group, testing
from cogworker_django.workflows import BatchFinished


@pytest.fixture(autouse=True)
def _no_redis_writes(r, prefix):
    yield
    assert not r.keys(f"{prefix}:batch*"), "the test modes write no batch to Redis"


def trace_entries():
    import json

    from cogworker_django.store import connection

    raw = connection.get_client().lrange(tj.wf_trace_key(), 0, -1)
    return [(e["kind"], e.get("args")) for e in map(json.loads, raw)]


def callbacks():
    return [j for j in testing.recorded() if j.get("callback_of")]


def test_fake_batch_fires_its_callbacks_once_drain_finishes_the_members(r, prefix):
    with testing.fake():
        with Batch(
            description="three",
            on_success=tj.wf_callback.s("ok"),
            on_complete=tj.wf_callback.s("done"),
        ) as batch:
            tj.wf_member.enqueue("a")
            tj.wf_member.enqueue_many(["b", "c"])
        assert [j["bid"] for j in tj.wf_member.jobs] == [batch.bid] * 3
        assert callbacks() == []
        status = batch.status()
        assert (status.total, status.pending, status.state) == (3, 3, "running")
        tj.wf_member.drain()
        fired = callbacks()
        assert sorted(j["callback_event"] for j in fired) == ["complete", "success"]
        assert {j["callback_of"] for j in fired} == {batch.bid}
        assert testing.drain() == 2
        assert batch.status().state == "succeeded"
        with pytest.raises(BatchFinished):
            Batch.reopen(batch.bid).add(tj.wf_member.s("late"))


def test_fake_on_complete_counts_a_failure_and_on_success_waits(r, prefix):
    with testing.fake():
        with Batch(on_success=tj.wf_callback.s("ok"), on_complete=tj.wf_callback.s("done")) as b:
            tj.wf_member.enqueue("a")
            tj.wf_not_json.enqueue()
            tj.wf_dead_unless_fixed.enqueue(1)
        tj.wf_member.drain()
        tj.wf_not_json.drain()  # a plain job may return anything
        with pytest.raises(RuntimeError):
            tj.wf_dead_unless_fixed.perform_one()
        assert [j["callback_event"] for j in callbacks()] == ["complete"]
        status = b.status()
        assert status.state == "stopped" and status.dead == 1 and status.failed_jobs == 1


def test_inline_chain_passes_each_return_value_on(r, prefix):
    with testing.inline():
        ref = chain(tj.wf_add.s(1, 2), tj.wf_add.s(10), tj.wf_add.s(100)).enqueue()
        status = ref.batch.status()
        assert ref.result(timeout=0) == 113  # the last step's value, kept in memory
    assert status.kind == "chain" and status.state == "succeeded"
    assert (status.steps, status.total, status.succeeded) == (3, 3, 3)


def test_fake_chain_steps_appear_one_at_a_time(r, prefix):
    with testing.fake():
        chain(tj.wf_add.s(1, 2), tj.wf_add.s(10)).enqueue()
        (first,) = tj.wf_add.jobs
        assert first["args"] == [1, 2] and first["step"] == 1
        assert tj.wf_add.perform_one() == 3
        (second,) = tj.wf_add.jobs
        assert second["args"] == [3, 10] and second["step"] == 2
        assert tj.wf_add.perform_one() == 13


def test_fake_group_then_gets_the_results_in_order(r, prefix):
    with testing.fake():
        batch = group(tj.wf_square.s(3), tj.wf_square.s(1), tj.wf_square.s(2)).enqueue(
            then=tj.wf_callback.s("sum").with_results()
        )
        assert len(tj.wf_square.jobs) == 3
        testing.drain()
        assert batch.status().state == "succeeded"
        (then,) = [e for e in trace_entries() if e[0] == "callback"]
        assert then[1] == [[9, 1, 4], "sum"]


def test_inline_group_then_receives_results(r, prefix, monkeypatch):
    received = []
    monkeypatch.setattr(tj.wf_callback, "func", lambda *a, **k: received.append((a, k)))
    with testing.inline():
        group(tj.wf_square.s(3), tj.wf_square.s(4)).enqueue(
            then=tj.wf_callback.s("n").with_results()
        )
    assert received == [(([9, 16], "n"), {})]


def test_a_member_adds_siblings_from_inside_its_run(r, prefix, monkeypatch):
    added = []

    def spawn(token, result=None):
        if token == "parent":
            current = Batch.current()
            added.extend(current.add(tj.wf_member.s("child1"), tj.wf_member.s("child2")))
        return token

    monkeypatch.setattr(tj.wf_member, "func", spawn)
    with testing.fake():
        with Batch(on_success=tj.wf_callback.s("ok")) as b:
            tj.wf_member.enqueue("parent")
        tj.wf_member.perform_one()
        assert len(added) == 2 and callbacks() == []
        tj.wf_member.drain()
        assert [j["callback_event"] for j in callbacks()] == ["success"]
        assert b.status().total == 3


def test_signatures_are_checked_at_once():
    with pytest.raises(TypeError):
        tj.wf_member.s(object())
    with pytest.raises(ValueError):
        tj.wf_member.s(float("nan"))
    sig = tj.wf_member.using(queue="low").s("x")
    assert sig.queue == "low" and repr(sig) == "testapp.jobs.wf_member.s('x')"
    with pytest.raises(TypeError):
        Batch(on_success="not a signature")


def test_nesting_is_refused():
    with testing.fake():
        with Batch():
            with pytest.raises(WorkflowError):
                chain(tj.wf_add.s(1, 2)).enqueue()
            with pytest.raises(WorkflowError):
                with Batch():
                    pass


def test_an_empty_batch_succeeds_when_its_block_closes():
    with testing.fake():
        with Batch(on_success=tj.wf_callback.s("empty")):
            pass
        assert [j["callback_event"] for j in callbacks()] == ["success"]
