"""Claim records (periodic/claims.py) against the real Redis: a claimed slot's job is
kept until it is pushed, the push removes it in the same step, orphan recovery pushes a
dead claimer's jobs once, and a push whose reply was lost is not undone (and so not
pushed twice). Two Ticker objects or a Ticker and an OrphanRecovery stand for two
worker processes; tests/periodic/test_periodic_fleet_faults.py does it with real SIGKILLs."""

from __future__ import annotations

import json
import logging
import threading

import pytest
import redis as redis_lib
from testapp import jobs as tj  # registers the jobs the entries name

from cogworker_django import conf
from cogworker_django.periodic import claims, ticker
from cogworker_django.periodic.ticker import Ticker
from cogworker_django.store import connection, keys, outbox, scripts
from cogworker_django.worker import keyguard
from cogworker_django.worker.fetch import BasicFetch
from cogworker_django.worker.recovery import OrphanRecovery

from ..helpers import wait_until
from ..worker.test_recovery_stalls import Checker, ghost, redis_clock
from .test_periodic_ticker import T0, entry, lose_the_first_claims_reply, queued

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.spread,
]  # the scripts touch one slot: they run on a cluster too

DEAD = "dead-host:1:aaaa"


class Refuse:
    def __call__(self, job, push):
        return None


def claim_and_die(r, e, slot=T0, identity=DEAD):
    """What a process killed right after its claim leaves behind: the claim, its record,
    and no job."""
    job = e.build_job(slot=slot)
    assert ticker.claim(r, e, slot, job, slot + 0.1, identity).code == "claimed"
    return job


def records(r, identity=DEAD):
    return r.hgetall(keys.periodic_claims(identity))


def test_the_claim_keeps_its_job_until_the_push_removes_it(r):
    e = entry()
    job = claim_and_die(r, e)
    (value,) = records(r).values()
    assert value.startswith(f"c {job['jid']} ") and json.loads(value.split(" ", 2)[2]) == job
    assert DEAD in r.smembers(keys.periodic_claimers())  # recovery will look at it
    t = Ticker([e], started_at=T0)
    t.tick(now=T0 + 0.2)  # the slot is taken: this process pushes nothing
    assert queued(r) == []

    Ticker([e], started_at=T0 + 60, identity="alive:1:bbbb").tick(now=T0 + 60.1)
    (pushed,) = queued(r)
    assert pushed["periodic_slot"] == T0 + 60
    assert records(r, "alive:1:bbbb") == {}  # removed with the push


def test_recovery_pushes_a_dead_claimers_job_once(r, caplog):
    e = entry()
    job = claim_and_die(r, e)
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        assert claims.recover(r, DEAD) == 1
    (pushed,) = queued(r)
    assert pushed["jid"] == job["jid"] and pushed["periodic_slot"] == T0
    assert records(r) == {} and claims.pending(r, DEAD) == 0
    assert "dead process dead-host:1:aaaa had claimed but not pushed" in caplog.text
    assert claims.recover(r, DEAD) == 0  # a second pass finds nothing
    assert len(queued(r)) == 1


def test_two_recoverers_racing_push_the_job_once(r):
    """Both read the record before either pushed: only the push that finds it there
    pushes (lua/periodic_push.lua)."""
    e = entry()
    job = claim_and_die(r, e)
    field = claims.field(e.name, T0)
    first = claims.push(r, DEAD, field, dict(job))
    second = claims.push(r, DEAD, field, dict(job))
    assert first == (job["jid"], False) and second == (None, True)
    assert [j["jid"] for j in queued(r)] == [job["jid"]]


def test_a_push_whose_reply_was_lost_is_not_rolled_back_nor_pushed_again(r, monkeypatch):
    """The push script ran and the connection was cut before its reply: the rollback
    finds the record gone and undoes nothing, so no process claims the slot again.
    Without records the rollback reopened the slot and it was pushed twice."""
    real = claims.ClaimedPush.plain

    def push_then_lose_the_reply(self, queue, data):
        real(self, queue, data)
        raise redis_lib.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(claims.ClaimedPush, "plain", push_then_lose_the_reply)
    e = entry()
    Ticker([e], started_at=T0).tick(now=T0 + 0.1)
    monkeypatch.setattr(claims.ClaimedPush, "plain", real)
    other = Ticker([e], started_at=T0)
    other.tick(now=T0 + 1.1)
    other.tick(now=T0 + 2.1)
    assert [j["periodic_slot"] for j in queued(r)] == [T0]
    assert r.get(keys.periodic_last_slot("e")) == str(T0)


def test_a_push_that_never_ran_is_rolled_back_with_its_record(r, monkeypatch):
    def refused(self, queue, data):
        raise redis_lib.ConnectionError("Connection refused.")

    monkeypatch.setattr(claims.ClaimedPush, "plain", refused)
    e = entry()
    Ticker([e], started_at=T0, identity="me:1:cccc").tick(now=T0 + 0.1)  # reported
    assert records(r, "me:1:cccc") == {} and not r.exists(keys.periodic_last_slot("e"))
    monkeypatch.undo()
    Ticker([e], started_at=T0).tick(now=T0 + 0.2)  # the slot is free again: fired once
    assert [j["periodic_slot"] for j in queued(r)] == [T0]


def test_a_job_refused_at_push_drops_its_record(r, configure):
    configure(MIDDLEWARE={"client": ["tests.periodic.test_periodic_claims.Refuse"], "server": []})
    e = entry()
    Ticker([e], started_at=T0, identity="me:1:dddd").tick(now=T0 + 0.1)
    assert queued(r) == [] and records(r, "me:1:dddd") == {}


def unique_job(e, slot):
    job = {**e.build_job(slot=slot), "unique": "until_executed", "unique_for": 60}
    return {**job, "unique_digest": "d" * 40}


def test_a_unique_jobs_lock_script_removes_the_record_with_the_push(r, monkeypatch):
    """A unique job is pushed by its lock script (lua/unique_push.lua), which checks and
    removes the claim record in the same step: no mark, so a lost reply is told apart
    too; a duplicate refused by its lock uses the slot up and drops the record."""

    if keys.spread():
        pytest.skip("a home per queue: the lock and the record are in two slots, so a unique "
                    "job marks its record (tests/store/test_cluster_spread.py covers that path)")  # fmt: skip

    def no_mark(self):
        raise AssertionError("a unique job's push must not mark its record")

    monkeypatch.setattr(claims.ClaimedPush, "other", no_mark)
    e = entry()
    first = unique_job(e, T0)
    assert ticker.claim(r, e, T0, first, T0 + 0.1, "me:1:eeee").code == "claimed"
    assert claims.push(r, "me:1:eeee", claims.field("e", T0), dict(first)) == (
        first["jid"],
        False,
    )
    assert [j["jid"] for j in queued(r)] == [first["jid"]]
    assert records(r, "me:1:eeee") == {} and r.exists(
        keys.unique("d" * 40, keys.home_of("default"))
    )
    # Pushed again from the same record (a second recoverer): nothing written.
    assert claims.push(r, "me:1:eeee", claims.field("e", T0), dict(first)) == (None, True)

    duplicate = unique_job(e, T0 + 60)
    assert ticker.claim(r, e, T0 + 60, duplicate, T0 + 60.1, "me:1:eeee").code == "claimed"
    assert claims.push(r, "me:1:eeee", claims.field("e", T0 + 60), dict(duplicate)) == (
        None,
        False,
    )
    assert records(r, "me:1:eeee") == {} and len(queued(r)) == 1


def test_a_priority_job_is_pushed_to_its_zset_with_the_record_removed(r, monkeypatch):
    def no_mark(self):
        raise AssertionError("a priority job's push must not mark its record")

    monkeypatch.setattr(claims.ClaimedPush, "other", no_mark)
    e = entry()
    job = {**e.build_job(slot=T0), "priority": 5}
    assert ticker.claim(r, e, T0, job, T0 + 0.1, "me:1:abab").code == "claimed"
    assert claims.push(r, "me:1:abab", claims.field("e", T0), dict(job)) == (job["jid"], False)
    (member,) = r.zrange(keys.priority_queue("default"), 0, -1)
    assert json.loads(member.partition("|")[2])["jid"] == job["jid"]
    assert records(r, "me:1:abab") == {} and queued(r) == []


def test_a_marked_record_is_never_pushed_again_nor_rolled_back(r, caplog):
    """A push path that marks the record first (a batch member, a test-mode sink) may
    have pushed when its process died or its reply was lost: recovery drops a marked
    record with a warning, and a rollback finding it marked undoes nothing (the slot
    is not reopened): at most once."""
    e = entry()
    job = claim_and_die(r, e, slot=T0 + 60)
    field = claims.field(e.name, T0 + 60)
    assert scripts.run("periodic_mark", r, [keys.periodic_claims(DEAD)], [field, job["jid"]]) == 1
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        assert claims.recover(r, DEAD) == 0
    assert "was being pushed when it died: not pushed again" in caplog.text
    assert records(r) == {} and queued(r) == []

    mine = e.build_job(slot=T0 + 120)
    assert ticker.claim(r, e, T0 + 120, mine, T0 + 120.1, "me:1:eeee").code == "claimed"
    field = claims.field(e.name, T0 + 120)
    mark = [keys.periodic_claims("me:1:eeee")], [field, mine["jid"]]
    assert scripts.run("periodic_mark", r, *mark) == 1
    assert scripts.run("periodic_mark", r, *mark) == 0  # marked once: one pusher
    rb = ticker.Rollback(e, T0 + 120, str(T0 + 60), "", mine["jid"], "me:1:eeee")
    assert ticker.rollback(r, rb) == 2
    assert r.get(keys.periodic_last_slot("e")) == str(T0 + 120)  # not reopened
    assert r.exists(keys.periodic_lock("e", T0 + 120)) and records(r, "me:1:eeee") == {}


def test_one_unreadable_record_never_stops_the_others(r, caplog):
    e, f = entry("e"), entry("f")
    claim_and_die(r, e)
    good = claim_and_die(r, f)
    r.hset(keys.periodic_claims(DEAD), "123:broken", "c jid-x {not json")
    with caplog.at_level(logging.ERROR, logger="cogworker_django"):
        assert claims.recover(r, DEAD) == 2
    assert good["jid"] in {j["jid"] for j in queued(r)}
    assert "123:broken of dead process dead-host:1:aaaa can't be read" in caplog.text
    assert records(r) == {}


def test_a_claims_hash_of_the_wrong_type_does_not_stop_the_entry(r):
    """The record is a safety net: a hash the key guard has not moved aside yet (wrong
    type) leaves the slot as safe as it was without records, and the job is pushed."""
    r.set(keys.periodic_claims("me:1:ffff"), "garbage")
    e = entry()
    Ticker([e], started_at=T0, identity="me:1:ffff").tick(now=T0 + 0.1)
    assert [j["periodic_slot"] for j in queued(r)] == [T0]
    assert r.get(keys.periodic_claims("me:1:ffff")) == "garbage"

    r.sadd(keys.inprogress_ids(), "me:1:ffff")
    assert keys.periodic_claims("me:1:ffff") in keyguard.check(r)


def test_a_recovered_push_failing_deterministically_is_kept_and_logged_once(r, caplog):
    """A queue key of the wrong type (until the key guard moves it) fails the push every
    pass: the record is kept for the next pass, one error line, pushed once it can be."""
    e = entry()
    job = claim_and_die(r, e)
    r.set(keys.queue("default"), "not a list")
    if keys.spread():
        # The push only writes the prefix's outbox; the relay to the queue is what fails,
        # and the entry waits there until the key is fixed (outbox.py).
        assert claims.recover(r, DEAD) == 1
        assert claims.pending(r, DEAD) == 0 and r.llen(keys.outbox()) == 1
        r.delete(keys.queue("default"))
        assert outbox.relay_leftovers(r, older_than=0) == 1
        assert len(queued(r)) == 1 and r.llen(keys.outbox()) == 0
        return
    with caplog.at_level(logging.ERROR, logger="cogworker_django"):
        assert claims.recover(r, DEAD) == 0
        assert claims.recover(r, DEAD) == 0
    assert caplog.text.count("not pushed (retried every pass)") == 1
    assert claims.pending(r, DEAD) == 1
    r.delete(keys.queue("default"))
    assert claims.recover(r, DEAD) == 1
    assert [j["jid"] for j in queued(r)] == [job["jid"]]


def test_a_rollback_checks_the_whole_jid(r):
    """The record names its jid followed by a space: a jid that merely starts the
    record's (``abc`` of ``abcX``) is another claim's, and nothing is undone for it."""
    e = entry()
    job = {**e.build_job(slot=T0), "jid": "abcX"}
    assert ticker.claim(r, e, T0, job, T0 + 0.1, "me:1:jid").code == "claimed"
    assert ticker.rollback(r, ticker.Rollback(e, T0, "", "", "abc", "me:1:jid")) == 0
    assert r.get(keys.periodic_last_slot("e")) == str(T0)
    assert list(records(r, "me:1:jid")) == [claims.field("e", T0)]
    assert ticker.rollback(r, ticker.Rollback(e, T0, "", "", "abcX", "me:1:jid")) == 1
    assert not r.exists(keys.periodic_last_slot("e")) and records(r, "me:1:jid") == {}


def _recover_at_once(r, dead: str) -> list[int]:
    """Two recovery passes on ``dead``, started together (a barrier) in two threads: how
    many jobs each pushed."""
    barrier, results, failures = threading.Barrier(2), [], []

    def recoverer() -> None:
        try:
            barrier.wait(5)
            results.append(claims.recover(r, dead))
        except Exception as exc:  # noqa: BLE001 - raised below
            failures.append(exc)

    threads = [threading.Thread(target=recoverer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert failures == []
    return results


def test_two_recoverers_at_once_push_the_job_once(r):
    """Two processes' recovery passes on one dead claimer, started together: each record
    is pushed by whichever push script finds it; the other writes nothing. The dead
    process claimed many entries' slots, and each racer walks all of them: both pushing
    some shows they ran at once (one finishing before the other began would push all),
    so rounds (each with its own dead process, every one checked in full) repeat, up to
    five, until one shows that."""
    n = 100
    rounds: list[list[int]] = []
    for round_ in range(5):
        dead = f"dead-host:{round_}:race"
        jids = {
            claim_and_die(r, entry(name=f"r{round_}e{i}"), identity=dead)["jid"] for i in range(n)
        }
        results = _recover_at_once(r, dead)
        assert len(results) == 2 and sum(results) == n, results
        pushed = [j["jid"] for j in queued(r)]
        assert sorted(pushed) == sorted(jids)  # each once
        assert records(r, dead) == {} and claims.pending(r, dead) == 0
        r.delete(keys.queue("default"))
        rounds.append(sorted(results))
        if min(results) > 0:
            break
    else:
        pytest.fail(f"no race happened in {len(rounds)} rounds: {rounds}")


class HoldSlow:
    """Hangs the push of entry "slow"'s runs until released (user code that hangs)."""

    release = None

    def __call__(self, job, push):
        if job.get("periodic") == "slow":
            HoldSlow.release.wait(20)
        return push(job)


def test_a_hung_recovery_of_one_identity_never_holds_up_another(r, configure):
    HoldSlow.release = threading.Event()
    configure(MIDDLEWARE={"client": ["tests.periodic.test_periodic_claims.HoldSlow"], "server": []})
    claim_and_die(r, entry("slow"), identity="dead:1:slow")
    quick = claim_and_die(r, entry("quick"), identity="dead:2:quick")
    pusher = claims.RecoveryPusher()
    try:
        assert pusher.submit("dead:1:slow")
        assert pusher.submit("dead:2:quick")
        assert not pusher.submit("dead:1:slow")  # still under way: not twice at once
        wait_until(lambda: quick["jid"] in {j["jid"] for j in queued(r)}, 10)
        assert claims.pending(r, "dead:1:slow") == 1
    finally:
        HoldSlow.release.set()
    wait_until(lambda: claims.pending(r, "dead:1:slow") == 0, 10)
    # (With a home per queue the record goes with the job's write to the outbox, and the
    # relay pushes it to its queue right after: wait for that push too.)
    wait_until(lambda: len(queued(r)) == 2, 10, message="both jobs queued")


def test_a_claim_whose_reply_was_lost_is_pushed_from_its_record_after_its_lock_lapsed(
    r, monkeypatch
):
    """The claim ran, its reply was lost, and Redis stayed away past the slot lock's
    life: the record still names the claim's job, so the next tick pushes it (and the
    record goes with the push), instead of leaving a record nobody pushes."""
    lose_the_first_claims_reply(monkeypatch)
    e = entry()
    t = Ticker([e], started_at=T0, identity="me:1:lost")
    t.tick(now=T0 + 0.1)
    r.delete(keys.periodic_lock("e", T0))  # lapsed while Redis was away
    t.tick(now=T0 + 1.1)
    assert [j["periodic_slot"] for j in queued(r)] == [T0]
    assert records(r, "me:1:lost") == {}


def test_a_stopped_ticker_with_nothing_left_is_no_longer_a_claimer(r):
    e = entry()
    t = Ticker([e], started_at=T0, identity="me:1:stop")
    t.tick(now=T0 + 0.1)
    assert "me:1:stop" in r.smembers(keys.periodic_claimers())
    t.close()
    assert "me:1:stop" not in r.smembers(keys.periodic_claimers())


def test_a_unique_push_stopped_by_an_error_keeps_the_record(r):
    """Rule 2: the record goes after the job's write; a queue key of the wrong type
    stops the script at the LPUSH and the record stays (the rollback then finds it)."""
    e = entry()
    job = unique_job(e, T0)
    assert ticker.claim(r, e, T0, job, T0 + 0.1, "me:1:wt").code == "claimed"
    r.set(keys.queue("default"), "not a list")
    with pytest.raises(redis_lib.ResponseError):
        claims.push(r, "me:1:wt", claims.field("e", T0), dict(job))
    assert list(records(r, "me:1:wt")) == [claims.field("e", T0)]


class SwallowErrors:
    """A client middleware that catches the push's error and returns None."""

    def __call__(self, job, push):
        try:
            return push(job)
        except redis_lib.RedisError:
            return None


def test_a_push_error_swallowed_by_a_middleware_drops_the_record(r, configure):
    configure(
        MIDDLEWARE={"client": ["tests.periodic.test_periodic_claims.SwallowErrors"], "server": []}
    )
    e = entry()
    job = claim_and_die(r, e, identity="me:1:sw")
    r.set(keys.queue("default"), "not a list")
    if keys.spread():
        pytest.skip("a home per queue: the push writes the outbox, which can't fail on the "
                    "queue's type (the relay waits for the key guard instead)")  # fmt: skip
    assert claims.push(r, "me:1:sw", claims.field("e", T0), dict(job)) == (None, False)
    assert records(r, "me:1:sw") == {}  # used up, as the middleware chose: not pushed later


def test_a_stopped_ticker_with_a_record_left_stays_listed_for_recovery(r):
    e = entry()
    t = Ticker([e], started_at=T0, identity="me:1:left")
    t.tick(now=T0 + 0.1)
    r.hset(keys.periodic_claims("me:1:left"), "1:x", "c j {}")  # say, a rollback still failing
    t.close()
    assert "me:1:left" in r.smembers(keys.periodic_claimers())


def checker():
    return Checker(5.0, since=redis_clock() - 3600)


def test_recovery_finds_a_claimer_listed_only_as_a_claimer(r, configure):
    """A process that claimed slots and had no in-progress list (basic fetch, or an older
    release's recovery forgot it there) is found through P:periodic:claimers: its
    claims are pushed once it has missed the threshold, then it is forgotten."""
    configure(ORPHAN_THRESHOLD=2)
    job = claim_and_die(r, entry())
    assert not r.sismember(keys.inprogress_ids(), DEAD)
    r.hset(keys.last_beat(), DEAD, str(int(redis_clock()) - 3600))
    recovery = OrphanRecovery("me", checker(), "default")
    conn = connection.get_client()
    recovery.run(conn)
    wait_until(lambda: [j["jid"] for j in queued(r)] == [job["jid"]], 10)
    wait_until(lambda: (recovery.run(conn), not r.sismember(keys.periodic_claimers(), DEAD))[1], 10)
    assert r.hget(keys.last_beat(), DEAD) is None


def test_a_live_claimer_is_judged_by_its_missed_beats_not_its_presence_alone(r, configure):
    """Basic fetch stamps its beats too: a live claimer the checker has known for longer
    than the threshold, whose presence key lapsed for a moment (a stall), is not dead
    while its stamp is fresh. (Unstamped, it was judged by the time since first seen.)"""
    threshold = 2.0
    configure(ORPHAN_THRESHOLD=threshold)
    claim_and_die(r, entry())  # a live basic-fetch process that claimed a slot
    fetch = BasicFetch(DEAD, conf.parse_queues(["default"]))

    conn = connection.get_client()

    def beat():
        # The package's own pipeline, run as the heartbeat runs it (the stamp is a
        # script by EVALSHA: scripts.execute loads it where a server lacks it).
        pipe = conn.pipeline(transaction=False)
        assert fetch.beat(pipe) == ["last-beat stamp"]
        scripts.execute(pipe, conn)

    recovery = OrphanRecovery("me", checker(), "default")
    r.hset(keys.process(DEAD), "beat", "1")  # present
    beat()
    assert recovery.run(conn) == 0
    known_since = redis_clock()
    wait_until(lambda: redis_clock() - known_since > threshold + 1.5, threshold * 3)
    r.delete(keys.process(DEAD))  # its presence lapsed: a stall, the process lives
    beat()
    assert recovery.run(conn) == 0
    assert claims.pending(r, DEAD) == 1 and queued(r) == []
    fetch.forget(r)
    assert r.hget(keys.last_beat(), DEAD) is None


def test_stale_stamps_of_processes_listed_nowhere_are_pruned(r, configure):
    configure(ORPHAN_THRESHOLD=30)
    now = int(redis_clock())
    r.hset(keys.last_beat(), mapping={"gone:1:a": now - 3600, "fresh:1:b": now, "bad:1:c": "?"})
    OrphanRecovery("me", checker(), "default").run(connection.get_client())
    assert set(r.hkeys(keys.last_beat())) == {"fresh:1:b"}


def test_a_claimers_set_of_the_wrong_type_does_not_stop_job_recovery(r, configure, caplog):
    configure(ORPHAN_THRESHOLD=2)
    ghost(r, "ghost:1:a", str(int(redis_clock()) - 3600))
    r.set(keys.periodic_claimers(), "garbage")
    recovery = OrphanRecovery("me", checker(), "default")
    with caplog.at_level(logging.ERROR, logger="cogworker_django"):
        assert recovery.run(connection.get_client()) == 2
        recovery.run(connection.get_client())
    assert caplog.text.count(f"can't read {keys.periodic_claimers()}") == 1


def test_hung_recoveries_are_capped_and_a_slow_one_is_logged(r, configure, caplog):
    HoldSlow.release = threading.Event()
    configure(MIDDLEWARE={"client": ["tests.periodic.test_periodic_claims.HoldSlow"], "server": []})
    claim_and_die(r, entry("slow"), identity="dead:1:slow")
    claim_and_die(r, entry("quick"), identity="dead:2:quick")
    pusher = claims.RecoveryPusher(max_threads=1)
    try:
        assert pusher.submit("dead:1:slow")
        assert not pusher.submit("dead:2:quick")  # one hangs already: at the cap
        (thread, started) = pusher._threads["dead:1:slow"]
        pusher._threads["dead:1:slow"] = (thread, started - claims.SLOW_RECOVERY - 1)
        with caplog.at_level(logging.WARNING, logger="cogworker_django"):
            pusher.submit("dead:2:quick")
            pusher.submit("dead:2:quick")
        assert caplog.text.count("claims of dead process dead:1:slow has taken") == 1
    finally:
        HoldSlow.release.set()
    wait_until(lambda: pusher.submit("dead:2:quick"), 10)
    wait_until(lambda: claims.pending(r, "dead:2:quick") == 0, 10)


def test_paths_that_mark_first_write_the_job_then_drop_the_record(r):
    """A scheduled push and a test-mode sink cannot remove the record in their own step:
    the record is marked, the job written where that path puts it, then the record is
    dropped, so recovery has nothing left to push again."""
    from cogworker_django import testing

    e, me = entry(), "me:1:cccc"
    later = claim_and_die(r, e, slot=T0 + 60, identity=me)
    later["at"] = 4_000_000_000.0  # 2096: scheduled, whatever the machine's clock says
    assert claims.push(r, me, claims.field(e.name, T0 + 60), later) == (later["jid"], False)
    (member,) = r.zrange(keys.schedule(keys.home_of("default")), 0, -1)
    assert json.loads(member)["jid"] == later["jid"]
    assert records(r, me) == {} and queued(r) == []

    sunk = claim_and_die(r, e, slot=T0 + 120, identity=me)
    with testing.fake():
        assert claims.push(r, me, claims.field(e.name, T0 + 120), sunk) == (sunk["jid"], False)
        assert [j["jid"] for j in tj.periodic_tick.jobs] == [sunk["jid"]]
    assert records(r, me) == {} and queued(r) == []
