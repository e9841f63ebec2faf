"""A home per queue (keys.spread): a Redis Cluster with a PREFIX without braces puts each
queue's keys in a slot of their own, so queues live on different masters. Real
(in-process) workers on a real 3-master cluster (tests/cluster_support.py); key names
built with keys.*. (A worker SIGKILLed on such a cluster: tests/store/test_cluster.py.)"""

from __future__ import annotations

import time

import pytest
from testapp import jobs as tj

from cogworker_django import api
from cogworker_django.conf import QueueSpec
from cogworker_django.core import payload
from cogworker_django.store import connection, homes, keys
from cogworker_django.worker import keyguard
from cogworker_django.worker.fetch import ReliableFetch

from ..helpers import wait_until

pytestmark = pytest.mark.spread


def _port(key: str) -> int:
    client = connection.get_client()
    real = client.built() if hasattr(client, "built") else client
    return int(real.get_node_from_key(key).port)


def three_masters() -> list[str]:
    """Three queue names whose homes are on three different masters."""
    picked: dict[int, str] = {}
    for i in range(200):
        name = f"q{i}"
        picked.setdefault(_port(keys.queue(name)), name)
        if len(picked) == 3:
            return list(picked.values())
    raise AssertionError("no three queues on three masters")


def counts(r) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(tj.runs_key()).items()}


def test_queues_on_three_masters_run_and_leave_nothing_behind(inworker, r):
    qs = three_masters()
    assert len({_port(keys.queue(q)) for q in qs}) == 3
    for q in qs:
        for i in range(5):
            tj.record.using(queue=q).enqueue(f"{q}-{i}")
    for q in qs:
        assert r.llen(keys.queue(q)) == 5
        assert q in r.smembers(keys.queues())
    w = inworker(settings={"QUEUES": qs}, concurrency=3)
    # The worker's identity as Redis knows it (the only process of this prefix), and the
    # homes it registered lists in: the keys looked for below are the ones it used.
    (ident,) = wait_until(lambda: r.smembers(keys.processes()), 10, message="presence")
    assert ident == w.identity
    every_home = {keys.home_of(q) for q in qs}
    wait_until(lambda: r.smembers(keys.inprogress_homes(ident)) == every_home, 10)
    assert ident in r.smembers(keys.inprogress_ids())
    wait_until(lambda: len(counts(r)) == 15, 20, message="all 15 ran")
    assert set(counts(r).values()) == {1}
    w.stop()
    for q in qs:
        assert not r.exists(keys.inprogress(ident, keys.home_of(q)))
        assert r.llen(keys.queue(q)) == 0
    assert not r.exists(keys.inprogress_homes(ident))
    assert ident not in r.smembers(keys.inprogress_ids())
    assert not r.hexists(keys.last_beat(), ident)
    assert not r.smembers(keys.processes())


def test_a_fetch_keeps_the_weighted_order_across_homes_in_one_script_call(r):
    qs = three_masters()
    for q in qs:
        for i in range(3):
            tj.record.using(queue=q).enqueue(f"{q}-{i}")
    fetch = ReliableFetch("me:1:aa", tuple(QueueSpec(q, 1) for q in qs))
    conn = connection.get_client()
    order_seen = []
    # Counted at the fetch's own script (the cluster's commandstats are shared by tests
    # running in parallel; test_cluster.py counts them over a whole drain).
    calls = []
    script = fetch._script
    fetch._script = lambda *a, **k: calls.append(1) or script(*a, **k)
    works = fetch.fetch_many(conn, [], 2)
    # The first home of this call's weighted order had two: one script call gave both.
    assert len(calls) == 1
    assert len(works) == 2 and len({w.queue for w in works}) == 1
    order_seen.append(works[0].queue)
    first = works[0].queue
    home = keys.home_of(first)
    assert r.llen(keys.inprogress("me:1:aa", home)) == 2
    # Acked into their own home's list while the next fetch takes from any home.
    more = fetch.fetch_many(conn, [w.raw for w in works], 10)
    assert r.llen(keys.inprogress("me:1:aa", home)) == sum(1 for w in more if w.queue == first)
    assert len(more) == 7  # every job left, from the three homes in turn
    for w in more:
        assert r.lpos(keys.inprogress("me:1:aa", keys.home_of(w.queue)), w.raw) is not None
    fetch.fetch_many(conn, [w.raw for w in more], 0)
    for q in qs:
        assert r.llen(keys.inprogress("me:1:aa", keys.home_of(q))) == 0


def test_weighted_order_holds_across_homes(r):
    """A queue of weight 9 is first about nine times in ten, wherever its home is."""
    qs = three_masters()
    fetch = ReliableFetch("me:1:ab", (QueueSpec(qs[0], 9), QueueSpec(qs[1], 1)))
    firsts = []
    for i in range(200):
        for q in qs[:2]:
            tj.record.using(queue=q).enqueue(f"{q}-{i}")
        (work,) = fetch.fetch_many(connection.get_client(), [], 1)
        firsts.append(work.queue)
        r.delete(*(keys.queue(q) for q in qs[:2]))
        r.delete(keys.inprogress("me:1:ab", keys.home_of(work.queue)))
    share = firsts.count(qs[0]) / len(firsts)
    assert 0.8 < share < 0.97, share


def test_scheduled_retried_and_dead_jobs_live_in_their_queues_home(inworker, r):
    qs = three_masters()
    tj.record.using(queue=qs[1]).enqueue_in(1, "later")
    assert r.zcard(keys.schedule(keys.home_of(qs[1]))) == 1
    tj.fails_once_dead.using(queue=qs[2]).enqueue("boom")
    w = inworker(settings={"QUEUES": qs})
    wait_until(lambda: counts(r).get("later") == 1, 15, message="the scheduled job ran")
    wait_until(lambda: r.zcard(keys.dead(keys.home_of(qs[2]))) == 1, 15, message="dead")
    assert r.zcard(keys.dead(keys.home_of(qs[1]))) == 0
    dead = api.DeadSet()
    assert dead.size() == 1
    (record,) = dead.page()
    assert record.home == keys.home_of(qs[2])
    assert dead.find(record.jid).jid == record.jid
    assert dead.search("boom").records[0].jid == record.jid
    assert dead.retry(record) == api.Outcome.DONE
    wait_until(lambda: r.zcard(keys.dead(keys.home_of(qs[2]))) == 1, 15, message="dead again")
    w.stop()


def test_the_admin_sets_merge_every_home_in_score_order(r):
    qs = three_masters()
    now = time.time()
    r.sadd(keys.queues(), *qs)  # as every push lists its queue (homes.py finds them so)
    for i, q in enumerate(qs * 3):
        job = payload.build("testapp.jobs.record", [i], {}, queue=q)
        r.zadd(keys.retry(keys.home_of(q)), {payload.encode(job): now + i})
    retry = api.RetrySet()
    assert retry.size() == 9
    page = retry.page(2, 4)
    assert [rec.score for rec in page] == [now + i for i in range(2, 6)]
    assert {rec.home for rec in page} == {keys.home_of(q) for q in qs}
    assert [rec.score for rec in retry.iter_records(batch=2)] == [now + i for i in range(9)]
    # A search over several homes continues by its cursor to the end.
    found, cursor = [], 0
    while True:
        part = retry.search("testapp", cursor=cursor, count=2)
        found += part.records
        cursor = part.cursor
        if cursor == 0:
            break
    assert len(found) == 9
    result = retry.retry_all()
    assert result.done == 9
    assert sum(r.llen(keys.queue(q)) for q in qs) == 9
    assert retry.size() == 0


def test_pause_and_overview_read_each_queues_home(r):
    qs = three_masters()
    tj.record.using(queue=qs[0]).enqueue("x")
    tj.record.using(queue=qs[1]).enqueue("y")
    api.Queue(qs[1]).pause()
    assert r.sismember(keys.paused(keys.home_of(qs[1])), qs[1])
    overview = {info.name: info for info in api.Queue.overview()}
    assert overview[qs[1]].paused and not overview[qs[0]].paused
    assert overview[qs[0]].size == 1
    assert qs[1] in api.Queue.names()
    api.Queue(qs[1]).resume()
    assert not api.Queue(qs[1]).paused()


def test_the_key_guard_moves_a_wrong_key_aside_in_its_own_home(r):
    qs = three_masters()
    tj.record.using(queue=qs[2]).enqueue("x")
    wrong = keys.dead(keys.home_of(qs[2]))
    r.set(wrong, "not a zset")
    moved = keyguard.check(connection.get_client(), qs)
    assert wrong in moved
    copies = api.Quarantine().list()
    (copy,) = keyguard.scan_copies(connection.get_client())
    assert keys.home_part(copy) == keys.home_of(qs[2])
    assert keyguard.parse_copy(copy)[0] == wrong
    assert len(copies) == 1


def test_unique_jobs_lock_in_their_queues_home(r):
    qs = three_masters()
    job = tj.record.using(queue=qs[0], unique="until_executed")
    assert job.enqueue("u") is not None
    assert job.enqueue("u") is None
    found = list(r.scan_iter(keys.unique("*", keys.home_of(qs[0]))))
    assert len(found) == 1


def test_homes_are_found_from_the_listing_and_the_configuration(r, configure):
    qs = three_masters()
    configure(QUEUES=[qs[0]])
    tj.record.using(queue=qs[1]).enqueue("x")
    conn = connection.get_client()
    found = homes.all_homes(conn)
    assert keys.home_of(qs[0]) in found and keys.home_of(qs[1]) in found
    assert keys.home_of(qs[2]) not in found


def test_a_batch_over_three_masters_runs_its_members_and_its_callback_once(inworker, r):
    """Members and callbacks reach their queues' homes through the prefix's outbox
    (outbox.py), run by a worker reading all three queues."""
    from cogworker_django import Batch

    qs = three_masters()
    with Batch(on_success=tj.record.using(queue=qs[0]).s("done")) as batch:
        for q in qs:
            for i in range(3):
                tj.record.using(queue=q).enqueue(f"{batch.bid}-{q}-{i}")
    assert sum(r.llen(keys.queue(q)) for q in qs) == 9
    assert r.llen(keys.outbox()) == 0
    w = inworker(settings={"QUEUES": qs})
    wait_until(lambda: counts(r).get("done") == 1, 30, message="on_success ran")
    c = counts(r)
    assert all(c[f"{batch.bid}-{q}-{i}"] == 1 for q in qs for i in range(3)), c
    time.sleep(0.5)
    assert counts(r).get("done") == 1
    assert r.llen(keys.outbox()) == 0
    w.stop()


def test_a_job_naming_no_queue_is_found_in_the_prefixs_home(r):
    """Filed in the prefix's own dead set (outbox.py buries there too): listed with the
    rest, whatever queues are known."""
    raw = '{"jid": "nq1", "func": "testapp.jobs.record"}'
    r.zadd(keys.dead(keys.root()), {raw: time.time()})
    assert keys.root() in homes.all_homes(connection.get_client())
    assert [rec.jid for rec in api.DeadSet().page()] == ["nq1"]
    assert api.DeadSet().page()[0].home == keys.root()


def test_cancel_finds_a_job_in_its_queues_home(r):
    qs = three_masters()
    later = tj.record.using(queue=qs[1]).enqueue_in(300, "later")
    job = tj.record.using(queue=qs[2])._build(("again",), {})
    r.sadd(keys.queues(), qs[2])
    r.zadd(keys.retry(keys.home_of(qs[2])), {payload.encode(job): time.time() + 300})
    queued = tj.record.using(queue=qs[0]).enqueue("now")
    assert api.cancel(later) == "scheduled"
    assert api.cancel(job["jid"]) == "retry"
    assert api.cancel(queued) == "queue"
    assert r.zcard(keys.schedule(keys.home_of(qs[1]))) == 0
    assert r.zcard(keys.retry(keys.home_of(qs[2]))) == 0
    assert r.llen(keys.queue(qs[0])) == 0


def test_basic_fetch_reads_queues_on_three_masters(inworker, r):
    qs = three_masters()
    api.Queue(qs[2]).pause()
    for q in qs:
        for i in range(4):
            tj.record.using(queue=q).enqueue(f"{q}-{i}")
    w = inworker(settings={"QUEUES": qs, "FETCH": "basic", "CONCURRENCY": 2})
    wait_until(lambda: len(counts(r)) == 8, 20, message="the 8 jobs of the unpaused queues")
    assert r.llen(keys.queue(qs[2])) == 4  # paused in its own home: left alone
    api.Queue(qs[2]).resume()
    wait_until(lambda: len(counts(r)) == 12, 20, message="the paused queue's jobs once resumed")
    assert set(counts(r).values()) == {1}
    w.stop()


def test_sigterm_hands_each_homes_unfinished_jobs_back_to_their_queues(inworker, r):
    qs = three_masters()[:2]
    held = {q: f"{q}-long-{keys.prefix()}" for q in qs}  # runs held at their gates
    for q, token in held.items():
        tj.gate(token)
        tj.wait_at_gate.using(queue=q).enqueue(token)
    w = inworker(settings={"QUEUES": qs}, concurrency=2, shutdown_timeout=1)
    for token in held.values():
        assert tj.entered[token].wait(15), f"{token} never started"
    (ident,) = r.smembers(keys.processes())
    w.stop()  # as on TERM: the grace passes, the hand-over requeues the unfinished
    for q in qs:
        raws = r.lrange(keys.queue(q), 0, -1)
        assert len(raws) == 1 and payload.decode(raws[0])["queue"] == q
        assert not r.exists(keys.inprogress(ident, keys.home_of(q)))
    for token in held.values():  # the abandoned runs end inside this test
        tj.gates.pop(token).set()
        tj.entered.pop(token)
    for p in w.manager.processors:
        if p.thread is not None:
            p.thread.join(10)


def test_a_workers_poller_relays_an_outbox_leftover_at_the_production_age(inworker, r):
    """A pusher that died after its batch script left an envelope; a worker's poller
    relays it once it is older than outbox.LEFTOVER_AGE (60 s, the default, not
    shortened: the envelope is written as of 61 s ago) and leaves a younger one alone."""
    import json

    from cogworker_django.store import outbox

    qs = three_masters()
    old = json.loads(
        outbox.envelope(
            keys.queue(qs[1]),
            payload.encode(payload.build("testapp.jobs.record", ["left"], {}, queue=qs[1])),
            "",
            qs[1],
        )
    )
    old["at"] = time.time() - (outbox.LEFTOVER_AGE + 1)
    young = outbox.envelope(
        keys.queue(qs[2]),
        payload.encode(payload.build("testapp.jobs.record", ["young"], {}, queue=qs[2])),
        "",
        qs[2],
    )
    r.lpush(keys.outbox(), json.dumps(old), young)
    w = inworker(settings={"QUEUES": qs})
    wait_until(lambda: counts(r).get("left") == 1, 20, message="the leftover relayed and run")
    assert r.lrange(keys.outbox(), 0, -1) == [young]
    assert "young" not in counts(r)
    w.stop()


def test_the_outbox_relays_after_the_masters_forgot_their_scripts(r):
    """The relay's scripts go by EVALSHA in one pipeline over three masters: refused
    (NOSCRIPT) after a restart, a failover or SCRIPT FLUSH, they are loaded and run in
    their places, and the envelopes leave the outbox."""
    from cogworker_django.store import outbox, scripts

    qs = three_masters()
    envelopes = [
        outbox.envelope(
            keys.queue(q),
            payload.encode(payload.build("testapp.jobs.record", [q], {}, queue=q)),
            "",
            q,
        )
        for q in qs
    ]
    r.lpush(keys.outbox(), *envelopes)
    sha = scripts.get("outbox_relay").sha
    for node in r.get_primaries():
        r.get_redis_connection(node).script_flush()
        assert r.get_redis_connection(node).script_exists(sha) == [False]
    assert outbox.relay(connection.get_client(), envelopes) == 3
    assert r.llen(keys.outbox()) == 0
    for q in qs:
        [raw] = r.lrange(keys.queue(q), 0, -1)
        assert payload.decode(raw)["args"] == [q]
