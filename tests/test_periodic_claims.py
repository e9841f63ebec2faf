"""Claim records (periodic/claims.py) against the real Redis: a claimed slot's job is
kept until it is pushed, the push removes it in the same step, orphan recovery pushes a
dead claimer's jobs once, and a push whose reply was lost is not undone (and so not
pushed twice). Two Ticker objects or a Ticker and an OrphanRecovery stand for two
worker processes; tests/test_periodic_fleet_faults.py does it with real SIGKILLs."""

from __future__ import annotations

import json
import logging

import pytest
import redis as redis_lib
from testapp import jobs as tj  # noqa: F401 - registers the jobs the entries name

from cogworker_django import keys, scripts
from cogworker_django.periodic import claims, ticker
from cogworker_django.periodic.ticker import Ticker

from .test_periodic_ticker import T0, entry, queued

pytestmark = pytest.mark.cluster  # the scripts touch one slot: they run on a cluster too

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
    assert DEAD in r.smembers(keys.inprogress_ids())  # recovery will look at it
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
    configure(MIDDLEWARE={"client": ["tests.test_periodic_claims.Refuse"], "server": []})
    e = entry()
    Ticker([e], started_at=T0, identity="me:1:dddd").tick(now=T0 + 0.1)
    assert queued(r) == [] and records(r, "me:1:dddd") == {}


def test_a_unique_job_marks_its_record_and_a_marked_record_is_never_pushed_again(r, caplog):
    """A unique job's push goes through its lock script, which can't remove the record:
    the record is marked first, dropped after; a dead process's marked record may have
    been pushed, so recovery drops it with a warning instead of pushing it."""
    e = entry()
    unique = {**e.build_job(slot=T0), "unique": "until_executed", "unique_for": 60}
    unique["unique_digest"] = "d" * 40
    assert ticker.claim(r, e, T0, unique, T0 + 0.1, "me:1:eeee").code == "claimed"
    field = claims.field(e.name, T0)
    assert claims.push(r, "me:1:eeee", field, dict(unique)) == (unique["jid"], False)
    assert [j["jid"] for j in queued(r)] == [unique["jid"]]
    assert records(r, "me:1:eeee") == {}

    job = claim_and_die(r, e, slot=T0 + 60)
    field = claims.field(e.name, T0 + 60)
    assert scripts.run("periodic_mark", r, [keys.periodic_claims(DEAD)], [field, job["jid"]]) == 1
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        assert claims.recover(r, DEAD) == 0
    assert "was being pushed when it died: not pushed again" in caplog.text
    assert records(r) == {} and len(queued(r)) == 1


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
    from cogworker_django import keyguard

    r.sadd(keys.inprogress_ids(), "me:1:ffff")
    assert keys.periodic_claims("me:1:ffff") in keyguard.check(r)


def test_a_recovered_push_failing_deterministically_is_kept_and_logged_once(r, caplog):
    """A queue key of the wrong type (until the key guard moves it) fails the push every
    pass: the record is kept for the next pass, one error line, pushed once it can be."""
    e = entry()
    job = claim_and_die(r, e)
    r.set(keys.queue("default"), "not a list")
    with caplog.at_level(logging.ERROR, logger="cogworker_django"):
        assert claims.recover(r, DEAD) == 0
        assert claims.recover(r, DEAD) == 0
    assert caplog.text.count("not pushed (retried every pass)") == 1
    assert claims.pending(r, DEAD) == 1
    r.delete(keys.queue("default"))
    assert claims.recover(r, DEAD) == 1
    assert [j["jid"] for j in queued(r)] == [job["jid"]]
