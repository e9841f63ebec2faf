"""api.ProcessSet, api.Workers and api.AwaitingRecovery: stale registry members, entries
that do not decode, lists awaiting recovery. (With a real worker subprocess: listing,
busy work, quiet and stop through pub/sub in tests/worker/test_worker_signals.py; a
killed worker's jobs awaiting recovery in tests/worker/test_killed_mid_run.py.)"""

import json
import time

import pytest

from cogworker_django.api import AwaitingRecovery, ProcessSet, Workers
from cogworker_django.store import keys

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]


def test_stale_members_are_skipped_and_pruned(r):
    r.sadd(keys.processes(), "gone-process")
    r.sadd(keys.processes(), "garbled")
    r.hset(keys.process("garbled"), mapping={"info": "{not json", "busy": "x", "beat": "?"})
    procs = ProcessSet().list()
    assert [p.identity for p in procs] == ["garbled"]
    assert procs[0].hostname == "" and procs[0].busy == 0 and procs[0].beat is None
    assert not r.sismember(keys.processes(), "gone-process")


def test_busy_entries_that_do_not_decode_still_show(r):
    ident = "p1"
    r.sadd(keys.processes(), ident)
    r.hset(
        keys.process(ident), mapping={"info": json.dumps({"hostname": "h"}), "beat": time.time()}
    )
    r.hset(keys.work(ident), mapping={"t1": "not json", "t2": json.dumps({"payload": "{}"})})
    busy = Workers().list()
    assert len(busy) == 2 and all(b.record.unparseable for b in busy)


def _redis_now(r) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def test_awaiting_recovery_lists_lists_without_a_presence(configure, r):
    configure(ORPHAN_THRESHOLD=300)
    now = _redis_now(r)
    dead, alive, empty, unstamped = "h1:11:aaaa", "h2:22:bbbb", "h3:33:cccc", "h4:44:dddd"
    r.sadd(keys.inprogress_ids(), dead, alive, empty, unstamped)
    for ident in (dead, alive, unstamped):
        r.lpush(
            keys.inprogress(ident, keys.home_of("default")),
            json.dumps({"jid": f"j-{ident}", "func": "a.b"}),
        )
    r.lpush(keys.inprogress(dead, keys.home_of("default")), "not json")
    r.hset(keys.process(alive), mapping={"info": "{}", "beat": now})
    r.hset(keys.last_beat(), mapping={dead: int(now) - 10, alive: int(now), empty: int(now) - 99})
    found = AwaitingRecovery().list()
    assert [o.identity for o in found] == [dead, unstamped]
    orphan = found[0]
    assert orphan.size == 2 and orphan.hostname == "h1" and orphan.pid == 11
    assert {j.jid for j in orphan.jobs if not j.unparseable} == {f"j-{dead}"}
    assert any(j.unparseable for j in orphan.jobs)  # shown, not dropped
    assert orphan.recover_at == int(now) - 10 + 1 + 300
    assert 289 <= orphan.recover_in <= 292 and not orphan.due
    assert 9 <= orphan.missing_for <= 12
    assert found[1].last_beat is None and found[1].recover_at is None
    assert AwaitingRecovery().size() == 3
    assert AwaitingRecovery().list(jobs_per_process=1)[0].jobs.__len__() == 1


def test_a_dead_claimer_with_periodic_slots_not_pushed_awaits_recovery(r):
    """A dead process whose only leftovers are claim records (periodic/claims.py) is
    listed with their count; a live one, or one with nothing left, is not."""
    now = time.time()
    for ident in ("dead-claimer", "live-claimer", "done-claimer"):
        r.sadd(keys.periodic_claimers(), ident)
    r.hset(keys.periodic_claims("dead-claimer"), mapping={"1:a": "c j1 {}", "2:b": "c j2 {}"})
    r.hset(keys.periodic_claims("live-claimer"), "1:a", "c j3 {}")
    r.hset(keys.process("live-claimer"), mapping={"info": "{}", "beat": now})
    r.hset(keys.last_beat(), "dead-claimer", int(now) - 5)
    (orphan,) = AwaitingRecovery().list()
    assert (orphan.identity, orphan.size, orphan.claims, orphan.jobs) == ("dead-claimer", 0, 2, [])
    assert AwaitingRecovery().size() == 2


def test_a_wrong_typed_registry_of_dead_processes_is_an_error_not_an_empty_list(r):
    import redis as redis_lib

    r.set(keys.inprogress_ids(), "garbage")
    with pytest.raises(redis_lib.ResponseError):
        AwaitingRecovery().list()
    r.delete(keys.inprogress_ids())
    r.set(keys.periodic_claimers(), "garbage")  # the claimers alone: skipped
    assert AwaitingRecovery().list() == []
