"""The ticker in this process against the real Redis, with a fixed clock (``tick(now)``):
the claim, catch-up, the running-lock grace, disabled entries, backoff, rollbacks and
the published schedule. Two Ticker objects stand for two worker processes."""

from __future__ import annotations

import json
import logging
import time

from testapp import jobs as tj  # noqa: F401 - registers the jobs the entries name

from cogworker_django.periodic import entries, ticker
from cogworker_django.periodic.ticker import Ticker
from cogworker_django.store import keys

from ..helpers import wait_until

T0 = 1_800_000_000  # a whole minute (and second) in UTC


def entry(name="e", cron="* * * * *", **extra):
    return entries.parse_entry(name, {"cron": cron, "job": "testapp.jobs.periodic_tick", **extra})


def queued(r, queue="default"):
    return [json.loads(x) for x in reversed(r.lrange(keys.queue(queue), 0, -1))]


def test_two_processes_claim_a_slot_once(r):
    e = entry()
    a, b = Ticker([e]), Ticker([e])
    for t in (a, b, a, b):
        t.tick(now=T0 + 0.5)
    (job,) = queued(r)
    assert job["periodic"] == "e" and job["periodic_slot"] == T0
    assert "periodic_until_executed" not in job
    assert r.get(keys.periodic_last_slot("e")) == str(T0)
    assert r.exists(keys.periodic_lock("e", T0))
    assert 60 < r.ttl(keys.periodic_lock("e", T0)) <= 60 + 60  # until the next slot + margin
    b.tick(now=T0 + 60.2)  # the next slot: b wins it, a finds it taken
    a.tick(now=T0 + 60.3)
    assert [j["periodic_slot"] for j in queued(r)] == [T0, T0 + 60]


def test_catch_up_off_skips_a_slot_missed_more_than_the_grace_before_the_start(r, caplog):
    # PERIODIC_GRACE at its default (300 s): the T0 slot of an hourly entry passed 301 s
    # before this process started, while no process ran.
    e = entry(cron="0 * * * *")
    t = Ticker([e], catch_up=False, started_at=T0 + 301)
    assert t.restart_grace == 300
    with caplog.at_level(logging.INFO, "cogworker_django"):
        t.tick(now=T0 + 302)
        t.tick(now=T0 + 303)
    assert queued(r) == []
    assert not r.exists(keys.periodic_last_slot("e"))  # last_slot means "ran": untouched
    said = [m for m in caplog.messages if "was missed" in m]
    assert len(said) == 1, said  # once, not every tick
    assert "PERIODIC_GRACE (300s)" in said[0] and "not fired" in said[0]
    t.tick(now=T0 + 3600.1)  # a slot that becomes due while it runs fires
    assert [j["periodic_slot"] for j in queued(r)] == [T0 + 3600]
    # A slot due just now is not "missed": a process that starts then fires it.
    Ticker([entry("f")], catch_up=False, started_at=T0 + 7200.4).tick(now=T0 + 7200.5)
    assert queued(r)[-1]["periodic"] == "f"


def test_a_missed_slot_another_process_fired_is_not_said(r, caplog):
    e = entry(cron="0 * * * *")
    Ticker([e], started_at=T0 - 10).tick(now=T0 + 1)  # a process that ran then fired it
    with caplog.at_level(logging.INFO, "cogworker_django"):
        Ticker([e], catch_up=False, started_at=T0 + 400).tick(now=T0 + 401)
    assert [j["periodic_slot"] for j in queued(r)] == [T0]
    assert "was missed" not in caplog.text


def test_catch_up_off_fires_a_slot_due_after_the_start_however_late_the_first_tick(r, caplog):
    # The first tick waits for the first orphan pass (tens of seconds at the production
    # timings): a slot that came due in between is not "missed".
    t = Ticker([entry()], catch_up=False, started_at=T0 - 3)
    with caplog.at_level(logging.INFO, "cogworker_django"):
        t.tick(now=T0 + 55)
    assert [j["periodic_slot"] for j in queued(r)] == [T0]
    assert "was missed" not in caplog.text
    # A slot missed less than PERIODIC_GRACE before the start (a restart's gap) fires ...
    Ticker([entry("g", "0 * * * *")], catch_up=False, started_at=T0 + 299).tick(now=T0 + 330)
    assert queued(r)[-1]["periodic"] == "g"
    # ... but not one that passed PERIODIC_GRACE or more before it.
    Ticker([entry("h", "0 * * * *")], catch_up=False, started_at=T0 + 300).tick(now=T0 + 330)
    assert queued(r)[-1]["periodic"] == "g"


def test_the_grace_is_the_setting(r, configure):
    configure(PERIODIC_GRACE=20)
    Ticker([entry("a")], catch_up=False, started_at=T0 + 19).tick(now=T0 + 25)
    Ticker([entry("b")], catch_up=False, started_at=T0 + 21).tick(now=T0 + 25)
    assert [j["periodic"] for j in queued(r)] == ["a"]
    configure(PERIODIC_GRACE=0)  # only slots due at or after the start
    Ticker([entry("c")], catch_up=False, started_at=T0).tick(now=T0 + 25)
    Ticker([entry("d")], catch_up=False, started_at=T0 + 1).tick(now=T0 + 25)
    assert [j["periodic"] for j in queued(r)] == ["a", "c"]


def test_catch_up_on_fires_the_latest_missed_slot_once(r):
    e = entry()
    r.set(keys.periodic_last_slot("e"), T0 - 600)
    Ticker([e], catch_up=True).tick(now=T0 + 45)
    Ticker([e], catch_up=True).tick(now=T0 + 50)
    assert [j["periodic_slot"] for j in queued(r)] == [T0]


def test_until_executed_blocked_slot_waits_out_the_grace(r, configure):
    configure(HEARTBEAT_INTERVAL=0.2)  # grace = 3 beats = 0.6 s
    e = entry(unique="until_executed")
    t = Ticker([e])
    t.tick(now=T0 + 0.1)
    (first,) = queued(r)
    assert first["periodic_until_executed"] is True
    lock = keys.periodic_running("e")
    assert r.get(lock) == first["jid"]
    assert 86000 < r.ttl(lock) <= 86400  # the queued TTL (UNIQUE_LOCK_TTL)

    t.tick(now=T0 + 60.1)  # blocked by the first run: within the grace, looked at again
    assert len(queued(r)) == 1
    r.delete(lock)  # the first run's (deferred) release lands
    t.tick(now=T0 + 60.2)
    second = queued(r)[-1]
    assert second["periodic_slot"] == T0 + 60 and r.get(lock) == second["jid"]

    t.tick(now=T0 + 120.1)  # blocked again
    time.sleep(0.7)  # past the grace
    t.tick(now=T0 + 120.2)  # counts as skipped now
    r.delete(lock)
    t.tick(now=T0 + 120.3)
    assert [j["periodic_slot"] for j in queued(r)] == [T0, T0 + 60]
    assert r.get(keys.periodic_last_slot("e")) == str(T0 + 60)  # a skipped slot is no run


def test_disabled_entries_are_skipped_without_a_burst_after(r):
    e, other = entry(), entry("other")
    t = Ticker([e, other])
    t.tick(now=T0 + 0.1)
    r.sadd(keys.periodic_disabled(), "e")
    t.tick(now=T0 + 60.1)
    t.tick(now=T0 + 120.1)
    assert [(j["periodic"], j["periodic_slot"]) for j in queued(r)] == [
        ("e", T0),
        ("other", T0),
        ("other", T0 + 60),
        ("other", T0 + 120),
    ]
    assert r.get(keys.periodic_last_slot("e")) == str(T0)  # untouched while disabled
    r.srem(keys.periodic_disabled(), "e")
    t.tick(now=T0 + 121)  # the slot it skipped is not fired late
    assert queued(r)[-1]["periodic_slot"] == T0 + 120 and len(queued(r)) == 4
    t.tick(now=T0 + 180.1)
    assert [j["periodic_slot"] for j in queued(r) if j["periodic"] == "e"] == [T0, T0 + 180]


def test_an_unreadable_disabled_set_counts_as_enabled(r, caplog):
    r.set(keys.periodic_disabled(), "wrong type")
    t = Ticker([entry()])
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        t.tick(now=T0 + 0.1)
        t.tick(now=T0 + 60.1)
    assert [j["periodic_slot"] for j in queued(r)] == [T0, T0 + 60]
    assert caplog.text.count("every periodic entry counts as enabled") == 1


def test_a_failing_entry_backs_off_and_the_others_keep_firing(r, caplog):
    bad, good = entry("bad"), entry("good")
    r.rpush(keys.periodic_last_slot("bad"), "wrong type")
    clock = [1000.0]
    t = Ticker([bad, good], clock=lambda: clock[0])
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        t.tick(now=T0 + 0.1)
        assert 4 < t.backoff_remaining("bad") <= 5
        t.tick(now=T0 + 60.1)  # still backing off: not even tried
    assert caplog.text.count("bad (next try in 5s)") == 1
    assert "WRONGTYPE" in caplog.text
    assert [(j["periodic"], j["periodic_slot"]) for j in queued(r)] == [
        ("good", T0),
        ("good", T0 + 60),
    ]
    clock[0] += 5  # (the backoff ran out) it fails again: twice as long
    t.tick(now=T0 + 60.2)
    assert 9 < t.backoff_remaining("bad") <= 10


def test_a_failed_push_rolls_the_claim_back(r):
    r.set(keys.queue("default"), "not a list")  # LPUSH fails: WRONGTYPE
    e = entry(unique="until_executed")
    clock = [1000.0]
    t = Ticker([e], clock=lambda: clock[0])
    t.tick(now=T0 + 0.1)
    # Nothing claimed any more: no last_slot, no slot lock, no running lock.
    assert not r.exists(keys.periodic_last_slot("e"))
    assert not r.exists(keys.periodic_lock("e", T0))
    assert not r.exists(keys.periodic_running("e"))
    assert t.backoff_remaining("e") > 4
    r.delete(keys.queue("default"))
    clock[0] += 5  # the backoff runs out
    t.tick(now=T0 + 0.2)  # the same slot fires once the push works
    assert [j["periodic_slot"] for j in queued(r)] == [T0]


def test_a_rollback_restores_the_previous_last_slot(r):
    r.set(keys.periodic_last_slot("e"), T0 - 60)
    r.set(keys.queue("default"), "not a list")
    Ticker([entry()]).tick(now=T0 + 0.1)
    assert r.get(keys.periodic_last_slot("e")) == str(T0 - 60)


class Refuse:
    """A client middleware that stops every push."""

    def __call__(self, job, push):
        return None


def test_a_refused_push_uses_the_slot_and_frees_the_running_lock(r, configure):
    configure(MIDDLEWARE={"client": ["tests.periodic.test_periodic_ticker.Refuse"], "server": []})
    t = Ticker([entry(unique="until_executed")])
    t.tick(now=T0 + 0.1)
    assert queued(r) == []
    assert r.get(keys.periodic_last_slot("e")) == str(T0)
    assert not r.exists(keys.periodic_running("e"))


def test_the_schedule_is_published_for_the_admin(r):
    r.hset(keys.periodic_schedule(), "removed-entry", "{}")
    t = Ticker([entry("a", "0 3 * * *", timezone="Asia/Tokyo"), entry("b")])
    t.tick(now=T0 + 0.1)
    published = {k: json.loads(v) for k, v in r.hgetall(keys.periodic_schedule()).items()}
    assert set(published) == {"a", "b"}
    assert published["a"]["cron"] == "0 3 * * *"
    assert published["a"]["timezone"] == "Asia/Tokyo"
    assert published["a"]["job"] == "testapp.jobs.periodic_tick"


def test_failing_to_publish_never_stops_the_ticks(r, caplog):
    r.set(keys.periodic_schedule(), "wrong type")
    t = Ticker([entry()])
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        t.tick(now=T0 + 0.1)
    assert "not published" in caplog.text
    assert len(queued(r)) == 1
    r.delete(keys.periodic_schedule())
    t.tick(now=T0 + 0.2)  # published on a later tick
    assert r.hkeys(keys.periodic_schedule()) == ["e"]


def job_as(e, jid):
    """``e``'s job under a given jid (what the ticker claims a slot for)."""
    return {**e.build_job(slot=T0), "jid": jid}


def test_claim_script_codes(r):
    e = entry(unique="until_executed")
    first = ticker.claim(r, e, T0, job_as(e, "jid1"), T0 + 1, "me")
    assert (first.code, first.detail) == ("claimed", "")
    assert ticker.claim(r, e, T0, job_as(e, "jid2"), T0 + 1, "me").code == "taken"
    blocked = ticker.claim(r, e, T0 + 60, job_as(e, "jid3"), T0 + 61, "me")
    assert (blocked.code, blocked.detail) == ("blocked", "jid1")
    r.delete(keys.periodic_running("e"))
    nxt = ticker.claim(r, e, T0 + 60, job_as(e, "jid4"), T0 + 61, "me")
    assert (nxt.code, nxt.detail) == ("claimed", str(T0))
    r.sadd(keys.periodic_disabled(), "e")
    assert ticker.claim(r, e, T0 + 120, job_as(e, "jid5"), T0 + 121, "me").code == "disabled"


# A private Redis whose data survives being killed: every write is in the AOF at once.
DURABLE = ["--appendonly", "yes", "--appendfsync", "always"]


class StopRedisAtPush:
    """A client middleware that stops the private Redis just before the push."""

    server = None

    def __call__(self, job, push):
        server, StopRedisAtPush.server = StopRedisAtPush.server, None
        if server is not None:
            server.stop()  # SIGKILL; the AOF keeps what it had
        return push(job)


def test_a_rollback_that_fails_is_retried_before_the_entry_is_looked_at_again(
    redis_server, configure
):
    server = redis_server(extra=DURABLE)
    configure(
        REDIS_URL=server.url,
        MIDDLEWARE={
            "client": ["tests.periodic.test_periodic_ticker.StopRedisAtPush"],
            "server": [],
        },
    )
    StopRedisAtPush.server = server
    t = Ticker([entry(unique="until_executed")])
    t.tick(now=T0 + 0.1)  # claimed; Redis goes away: the push and its rollback fail
    t.tick(now=T0 + 0.2)  # still away: nothing to do, and no backoff
    assert t.backoff_remaining("e") == 0
    server.start()
    c = server.client()
    assert c.get(keys.periodic_last_slot("e")) == str(T0)  # the claim outlived the restart
    assert c.exists(keys.periodic_running("e"))

    def fired():
        t.tick(now=T0 + 0.3)
        return c.llen(keys.queue("default"))

    wait_until(fired, 5, message="the slot fired after the rollback")
    time.sleep(0.1)
    t.tick(now=T0 + 0.4)
    (raw,) = c.lrange(keys.queue("default"), 0, -1)
    job = json.loads(raw)
    assert job["periodic_slot"] == T0
    assert c.get(keys.periodic_running("e")) == job["jid"]
    assert c.get(keys.periodic_last_slot("e")) == str(T0)


def test_the_first_tick_waits_for_the_first_orphan_recovery(r):
    recovered = []
    t = Ticker([entry(cron="* * * * * *")], ready=lambda: bool(recovered))
    for _ in range(3):  # the chore runs, and fires nothing, until recovery has run once
        assert t.run() == t.interval
        time.sleep(0.4)
    assert queued(r) == [] and not r.exists(keys.periodic_schedule())
    recovered.append(True)
    wait_until(lambda: t.run() and queued(r), 3, message="a run once recovery has run")
    t.close()


def test_a_claim_whose_push_never_happens_blocks_the_entry_briefly_not_for_a_day(r):
    """A process killed between the claim and the push (or a push a Redis restart lost)
    leaves the running lock with the claim TTL; the push confirms it with the queued TTL,
    unless the run already started (then it keeps the run's active TTL)."""
    from cogworker_django.periodic import running_lock

    e = entry(unique="until_executed")
    lock = keys.periodic_running("e")
    result = ticker.claim(
        r, e, T0, job_as(e, "never-pushed"), T0 + 0.1, "me"
    )  # ... and then the process died
    assert result.code == "claimed"
    assert running_lock.active_ttl() < r.ttl(lock) <= running_lock.claim_ttl()

    r.delete(lock)
    Ticker([e]).tick(now=T0 + 60.1)  # claim, push, confirm
    (job,) = queued(r)
    assert r.get(lock) == job["jid"] and 86000 < r.ttl(lock) <= 86400

    # A run that started before the confirmation keeps its active TTL.
    r.set(lock, "fast-run", ex=running_lock.active_ttl())
    assert running_lock.confirm(r, lock, "fast-run") is False
    assert r.ttl(lock) <= running_lock.active_ttl()
    assert running_lock.confirm(r, lock, "someone-else") is False


def lose_the_first_claims_reply(monkeypatch):
    """The next claim runs in Redis, then its reply is lost (a connection cut)."""
    import redis as redis_lib

    real_claim = ticker.claim
    cut = {"once": True}

    def claim_then_lose_the_reply(*args, **kwargs):
        result = real_claim(*args, **kwargs)
        if cut.pop("once", False):
            raise redis_lib.ConnectionError("Connection closed by server.")
        return result

    monkeypatch.setattr(ticker, "claim", claim_then_lose_the_reply)


def test_a_claim_whose_reply_is_lost_is_pushed_once_redis_answers(r, monkeypatch):
    """The claim script ran but its reply never came (a connection cut by a restart):
    the per-slot lock names this claim's jid, so the next tick pushes that very job (the
    slot fires once, the until_executed lock is confirmed), instead of the slot being
    skipped and the entry blocked by a lock whose job never existed."""
    lose_the_first_claims_reply(monkeypatch)
    e = entry(unique="until_executed")
    t = Ticker([e], started_at=T0)
    t.tick(now=T0 + 0.1)  # claimed in Redis, the reply lost: nothing pushed yet
    assert queued(r) == []
    t.tick(now=T0 + 1.1)
    (job,) = queued(r)
    assert job["periodic_slot"] == T0
    assert (
        r.get(keys.periodic_running("e")) == job["jid"]
        and r.ttl(keys.periodic_running("e")) > 86000
    )
    t.tick(now=T0 + 2.1)
    assert len(queued(r)) == 1  # once


def test_a_claim_that_never_ran_leaves_nothing_to_push(r, monkeypatch):
    import redis as redis_lib

    real_claim = ticker.claim
    cut = {"once": True}

    def refused_before_running(*args, **kwargs):
        if cut.pop("once", False):
            raise redis_lib.ConnectionError("Connection refused.")
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(ticker, "claim", refused_before_running)
    t = Ticker([entry()], started_at=T0)
    t.tick(now=T0 + 0.1)
    t.tick(now=T0 + 1.1)  # claims and pushes normally
    assert [j["periodic_slot"] for j in queued(r)] == [T0]


def test_a_renamed_ticker_claims_under_its_new_identity_from_its_next_tick(r):
    """A process fenced and carrying on under a new identity (worker/launcher.py): its
    ticker writes its claim records under the new one from its next tick, and the old
    one, holding no claim, leaves the claimers."""
    e = entry()
    t = Ticker([e], identity="old-ident")
    t.tick(now=T0 + 0.5)
    assert "old-ident" in r.smembers(keys.periodic_claimers())
    t.rename("new-ident")
    assert t.identity == "old-ident"  # not mid-tick
    t.tick(now=T0 + 60.5)
    assert t.identity == "new-ident"
    assert "old-ident" not in r.smembers(keys.periodic_claimers())
    assert "new-ident" in r.smembers(keys.periodic_claimers())
    assert [j["periodic_slot"] for j in queued(r)] == [T0, T0 + 60]


def test_a_periodic_push_rings_the_doorbell_only_onto_an_empty_queue(r):
    """Idle workers start a fired slot's job at once (store/bell.py): the push script
    rings its queue's doorbell when it found the list empty, and only then."""
    t = Ticker([entry()])
    t.tick(now=T0 + 0.5)
    assert r.llen(keys.queue("default")) == 1
    assert r.llen(keys.bell("default")) == 1
    t.tick(now=T0 + 60.5)  # the first job still waits: no idle worker to wake
    assert r.llen(keys.queue("default")) == 2
    assert r.llen(keys.bell("default")) == 1
