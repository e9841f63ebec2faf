"""Batches on a Redis Cluster with a home per queue (keys.spread): a batch's keys are in
the prefix's home and its members' queues in theirs, so the batch scripts put each job
in the outbox (in the batch's slot) and a relay pushes it on (outbox.py), exactly once:
after a crash between the two, after a lost removal, with two relayers."""

from __future__ import annotations

import json
import logging

import pytest
import redis
from testapp import jobs as tj

from cogworker_django import Batch, chain
from cogworker_django.core import payload
from cogworker_django.store import connection, keys, outbox, scripts
from cogworker_django.workflows import store
from cogworker_django.workflows.middleware import BatchMiddleware

spread = pytest.mark.spread


def run_in_worker(job, fn=lambda: "ok"):
    """What a worker's server chain does with ``job`` around ``fn`` (the job itself)."""
    return BatchMiddleware()(job, job["queue"], fn)


def queued(r, queue):
    return [json.loads(raw) for raw in r.lrange(keys.queue(queue), 0, -1)]


def listed_in_outbox(r):
    return r.lrange(keys.outbox(), 0, -1)


def three_queues_on_three_masters(r):
    """Queue names whose homes are on three different masters (a 3-master cluster)."""
    found: dict[str, str] = {}
    for i in range(200):
        q = f"q{i}"
        node = r.get_node_from_key(keys.queue(q)).name
        if node not in found:
            found[node] = q
        if len(found) == 3:
            break
    assert len(found) == 3, found
    return list(found.values())


def members(bid, queue, *tokens):
    """Payloads of batch ``bid``'s members, built as client.push would pass them."""
    return [tj.wf_member.using(queue=queue).s(t).build(bid=bid) for t in tokens]


def open_batch(**callbacks):
    """A batch with an open block (its callbacks wait until the block closes)."""
    batch = Batch(**callbacks)
    batch.__enter__()
    return batch


@spread
def test_members_in_three_queues_land_in_them_once_and_are_counted(r, prefix):
    assert keys.spread()
    qa, qb, qc = three_queues_on_three_masters(r)
    with Batch(description="spread") as batch:
        a = tj.wf_member.using(queue=qa).enqueue("a")
        many = tj.wf_member.using(queue=qb).enqueue_many(["b1", "b2"])
        later = tj.wf_member.using(queue=qc).enqueue_in(60, "c")
    jids = [a, *many, later]
    assert r.smembers(keys.batch_pending(batch.bid)) == set(jids)
    assert r.lrange(keys.batch_jids(batch.bid), 0, -1) == jids
    assert r.hget(keys.batch(batch.bid), "total") == "4"
    assert [j["jid"] for j in queued(r, qa)] == [a]
    assert [j["jid"] for j in queued(r, qb)][::-1] == many
    (scheduled,) = r.zrange(keys.schedule(keys.home_of(qc)), 0, -1)
    assert json.loads(scheduled)["jid"] == later
    assert all(j["bid"] == batch.bid for q in (qa, qb) for j in queued(r, q))
    assert listed_in_outbox(r) == []
    assert {qa, qb, qc} <= r.smembers(keys.queues())
    # Nothing more to relay: the leftovers pass finds nothing, pushes nothing.
    assert outbox.relay_leftovers(connection.get_client(), older_than=0) == 0
    assert len(queued(r, qa)) == 1 and len(queued(r, qb)) == 2


@spread
def test_a_crash_between_script_and_relay_is_relayed_by_the_poller_once(r, prefix):
    qa, qb, qc = three_queues_on_three_masters(r)
    batch = open_batch()
    jobs = [
        *members(batch.bid, qa, "a"),
        *members(batch.bid, qb, "b"),
        *members(batch.bid, qc, "c"),
    ]
    conn = connection.get_client()
    count, envelopes = store.push_counted(batch.bid, jobs, conn)  # ... and the pusher died
    assert count == 3 and len(envelopes) == 3
    assert r.hget(keys.batch(batch.bid), "total") == "3"  # counted: in the outbox
    assert sorted(listed_in_outbox(r)) == sorted(envelopes)
    assert all(queued(r, q) == [] for q in (qa, qb, qc))
    # Too young to be a leftover: its pusher may be relaying it right now.
    assert outbox.relay_leftovers(conn) == 0
    assert len(listed_in_outbox(r)) == 3
    assert outbox.relay_leftovers(conn, older_than=0) == 3
    assert listed_in_outbox(r) == []
    for q, job in zip((qa, qb, qc), jobs, strict=True):
        assert [j["jid"] for j in queued(r, q)] == [job["jid"]]
    # Again (a second poller, the pusher coming back with what it read): nothing more.
    assert outbox.relay_leftovers(conn, older_than=0) == 0
    for raw in envelopes:
        r.lpush(keys.outbox(), raw)  # as if a relayer read them before their removal
    assert outbox.relay(conn, envelopes) == 0
    assert listed_in_outbox(r) == []
    assert all(len(queued(r, q)) == 1 for q in (qa, qb, qc))
    batch.__exit__(None, None, None)


@spread
def test_a_relay_whose_removal_was_lost_removes_the_envelope_without_pushing(r, prefix):
    (qa, *_) = three_queues_on_three_masters(r)
    batch = open_batch()
    conn = connection.get_client()
    _, (raw,) = store.push_counted(batch.bid, members(batch.bid, qa, "a"), conn)
    entry = outbox.read(raw)
    assert (entry.key, entry.score, entry.queue) == (keys.queue(qa), "", qa)
    marker = keys.relayed(entry.id, keys.home_of(qa))
    # The relay script ran, the LREM after it never did.
    args = [entry.value, entry.score, outbox.MARKER_TTL, "", 0]
    assert scripts.run("outbox_relay", conn, [marker, entry.key], args) == 1
    assert listed_in_outbox(r) == [raw]
    assert outbox.relay_leftovers(conn, older_than=0) == 0
    assert listed_in_outbox(r) == []
    assert len(queued(r, qa)) == 1
    assert 0 < r.ttl(marker) <= outbox.MARKER_TTL  # kept, for a relayer that read it too
    batch.__exit__(None, None, None)


@spread
def test_an_entry_that_is_not_an_envelope_goes_to_dead(r, prefix):
    qa, qb, _ = three_queues_on_three_masters(r)
    good = outbox.envelope(keys.queue(qa), payload.encode({"jid": "x"}), "", qa)
    elsewhere = json.loads(good) | {"queue": qb}  # target outside its queue's home
    garbage = ["not json", json.dumps({"id": "x"}), json.dumps(elsewhere), "[1, 2]"]
    for raw in garbage:
        r.lpush(keys.outbox(), raw)
    r.lpush(keys.outbox(), good)
    conn = connection.get_client()
    assert outbox.relay_leftovers(conn, older_than=0) == 1
    assert listed_in_outbox(r) == []
    assert len(queued(r, qa)) == 1 and queued(r, qb) == []
    dead = [json.loads(m) for m in r.zrange(keys.dead(keys.root()), 0, -1)]
    assert sorted(d["raw_payload"] for d in dead) == sorted(garbage)
    assert {(d["func"], d["error_class"]) for d in dead} == {
        (payload.UNPARSEABLE, "InvalidOutboxEntry")
    }


@spread
def test_a_target_of_the_wrong_type_never_fails_the_push_and_is_relayed_once_fixed(r, prefix):
    (qa, *_) = three_queues_on_three_masters(r)
    r.set(keys.queue(qa), "not a list")
    with Batch() as batch:
        jid = tj.wf_member.using(queue=qa).enqueue("a")  # counted; the relay was refused
    assert r.smembers(keys.batch_pending(batch.bid)) == {jid}
    assert len(listed_in_outbox(r)) == 1
    conn = connection.get_client()
    with pytest.raises(Exception, match="WRONGTYPE"):
        outbox.relay_leftovers(conn, older_than=0)  # for the poller's backoff
    assert len(listed_in_outbox(r)) == 1
    r.delete(keys.queue(qa))  # the key guard moved it aside
    assert outbox.relay_leftovers(conn, older_than=0) == 1
    assert [j["jid"] for j in queued(r, qa)] == [jid]


@spread
def test_callbacks_reach_their_queues_through_the_outbox_once(r, prefix):
    qa, qb, qc = three_queues_on_three_masters(r)
    with Batch(
        on_success=tj.wf_callback.using(queue=qb).s("ok"),
        on_complete=tj.wf_callback.using(queue=qc).s("done"),
    ) as batch:
        tj.wf_member.using(queue=qa).enqueue_many(["a", "b"])
    a, b = queued(r, qa)[::-1]
    run_in_worker(a)
    # Not finished: the script was given the callbacks' envelopes and listed none.
    assert listed_in_outbox(r) == [] and queued(r, qb) == [] and queued(r, qc) == []
    run_in_worker(b)
    (success,) = queued(r, qb)
    (complete,) = queued(r, qc)
    assert (success["callback_event"], complete["callback_event"]) == ("success", "complete")
    assert success["callback_of"] == complete["callback_of"] == batch.bid
    assert listed_in_outbox(r) == []
    for job in (a, b, a):  # delivered again: nothing changes, nothing is pushed
        run_in_worker(job)
    assert len(queued(r, qb)) == 1 and len(queued(r, qc)) == 1
    assert {qb, qc} <= r.smembers(keys.queues())
    status = r.hmget(keys.batch(batch.bid), ["success_jid", "complete_jid"])
    assert status == [success["jid"], complete["jid"]]


@spread
def test_a_callback_fired_by_a_crashed_worker_is_relayed_once_by_the_poller(r, prefix):
    qa, qb, _ = three_queues_on_three_masters(r)
    with Batch(on_success=tj.wf_callback.using(queue=qb).s("ok")) as batch:
        tj.wf_member.using(queue=qa).enqueue("a")
    (a,) = queued(r, qa)
    found = store.meta(batch.bid)
    conn = connection.get_client()
    outcome, envelopes = store.update_counted(batch.bid, "success", a["jid"], found, conn=conn)
    assert outcome.success_jid and listed_in_outbox(r) == envelopes  # ... and it died
    run_in_worker(a)  # run again (orphan recovery): seen, nothing pushed, nothing relayed
    assert queued(r, qb) == []
    assert outbox.relay_leftovers(conn, older_than=0) == 1
    assert [j["jid"] for j in queued(r, qb)] == [outcome.success_jid]
    assert outbox.relay_leftovers(conn, older_than=0) == 0


@spread
def test_a_chains_next_step_reaches_its_queue_through_the_outbox(r, prefix):
    qa, qb, _ = three_queues_on_three_masters(r)
    flow = chain(tj.wf_add.using(queue=qa).s(1, 2), tj.wf_add.using(queue=qb).s(10))
    ch = flow.enqueue()
    (first,) = queued(r, qa)
    assert first["bid"] == ch.bid
    run_in_worker(first, lambda: 3)
    (second,) = queued(r, qb)
    assert second["args"] == [3, 10] and second["step"] == 2 and second["bid"] == ch.bid
    assert listed_in_outbox(r) == []
    run_in_worker(first, lambda: 3)  # delivered again: no second step
    assert len(queued(r, qb)) == 1
    run_in_worker(second, lambda: 13)
    assert r.hexists(keys.batch(ch.bid), "success_at")


def test_off_spread_the_outbox_is_never_used(r, prefix):
    assert not keys.spread()
    with Batch(on_success=tj.wf_callback.s("ok")) as batch:
        tj.wf_member.enqueue_many(["a", "b"])
        tj.wf_member.enqueue_in(60, "later")
    assert len(queued(r, "default")) == 2
    assert r.zcard(keys.schedule(keys.home_of("default"))) == 1
    for job in queued(r, "default"):
        run_in_worker(job)
    assert r.smembers(keys.batch_pending(batch.bid)) == {
        json.loads(m)["jid"] for m in r.zrange(keys.schedule(keys.home_of("default")), 0, -1)
    }
    assert not r.exists(keys.outbox())
    assert outbox.relay_leftovers(connection.get_client(), older_than=0) == 0


@spread
def test_an_outage_after_the_script_never_fails_the_push(r, prefix, caplog):
    (qa, *_) = three_queues_on_three_masters(r)
    batch = open_batch()
    conn = connection.get_client()
    _, envelopes = store.push_counted(batch.bid, members(batch.bid, qa, "a", "b"), conn)
    away = redis.Redis(port=1, socket_connect_timeout=0.2)  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        assert outbox.relay(away, envelopes) == 0
        assert outbox.relay(away, envelopes) == 0
    warned = [rec for rec in caplog.records if "Redis unavailable" in rec.getMessage()]
    assert len(warned) == 1 and outbox.COMPONENT in warned[0].getMessage()
    assert len(listed_in_outbox(r)) == 2  # left for the poller
    assert outbox.relay_leftovers(conn, older_than=0) == 2
    assert len(queued(r, qa)) == 2 and listed_in_outbox(r) == []
    batch.__exit__(None, None, None)


def test_off_spread_callbacks_are_pushed_by_the_script_itself(r, prefix):
    with Batch(on_success=tj.wf_callback.s("ok")) as batch:
        tj.wf_member.enqueue("a")
    (a,) = queued(r, "default")
    r.delete(keys.queue("default"))
    run_in_worker(a)
    (fired,) = queued(r, "default")
    assert fired["callback_of"] == batch.bid
    assert not r.exists(keys.outbox())
