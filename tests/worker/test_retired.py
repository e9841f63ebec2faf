"""A fenced process carries on under a new identity (worker/retired.py): the jobs it took
under the old one are settled from the old lists they are on, the old identity stays
registered while any is left, and is forgotten once none is. Driven on one fetch strategy
and ledger in this process (real Redis, real scripts), so each step is the test's."""

from __future__ import annotations

import json

import pytest
from testapp import jobs as tj

from cogworker_django import conf
from cogworker_django.store import keys
from cogworker_django.store.codec import raw_text
from cogworker_django.worker.fetch import ReliableFetch
from cogworker_django.worker.ledger import Filing, Ledger

from ..helpers import wait_until

OLD = "retired-test:1:aaaa"
NEW = "retired-test:1:bbbb"


@pytest.fixture
def fetcher(configure):
    configure(HISTORY=False)
    return ReliableFetch(OLD, conf.get().QUEUES)


def home() -> str:
    return keys.home_of("default")


def listed(r, identity: str) -> list[str]:
    return [raw_text(x) for x in r.lrange(keys.inprogress(identity, home()), 0, -1)]


def take(fetcher, r, ledger: Ledger, number: int):
    """One fetch as the dispatcher makes it: out in the ledger, its jobs in on return."""
    ledger.fetch_out(number)
    works = fetcher.fetch_many(r, [], 1)
    ledger.fetched(number, works)
    return works[0]


def test_jobs_taken_before_the_rename_are_settled_from_the_old_list(fetcher, r):
    ledger = Ledger()
    tj.record.enqueue_many([("a",), ("b",), ("c",)])
    acked, filed, given = (take(fetcher, r, ledger, n) for n in (1, 2, 3))
    fetcher.rename(r, NEW, ledger)
    assert fetcher.identity == NEW
    # The new identity is registered before any fetch can use its lists.
    assert {OLD, NEW} <= {raw_text(m) for m in r.smembers(keys.inprogress_ids())}
    tj.record.enqueue("t4")
    fresh = take(fetcher, r, ledger, 4)
    assert listed(r, NEW) == [fresh.raw]
    assert sorted(listed(r, OLD)) == sorted(w.raw for w in (acked, filed, given))

    # An ack carried by a fetch, a filing and a give-back: each from the list it is on.
    fetcher.fetch_many(r, [acked.raw, fresh.raw], 0)
    fetcher.file(r, filed.raw, Filing("retry", 1.0, filed.raw))
    assert fetcher.give_back(r, [given.raw]) == 1
    assert listed(r, OLD) == [] and listed(r, NEW) == []
    assert r.zcard(keys.retry(home())) == 1
    assert r.llen(keys.queue("default")) == 1  # the given-back job, on its queue


def test_the_old_identity_is_beaten_while_jobs_are_left_and_forgotten_after(fetcher, r):
    ledger = Ledger()
    tj.record.enqueue("t1")
    work = take(fetcher, r, ledger, 1)
    fetcher.rename(r, NEW, ledger)
    r.hdel(keys.last_beat(), OLD)  # as a recoverer of the old identity leaves it
    pipe = r.pipeline(transaction=False)
    names = fetcher.beat(pipe)
    pipe.execute()
    assert "retired identity's last-beat stamp" in names
    assert r.hexists(keys.last_beat(), OLD) and r.hexists(keys.last_beat(), NEW)

    fetcher.after_beat(r, ledger)  # a job still on the old list: nothing forgotten
    assert fetcher.retired is not None
    assert OLD in {raw_text(m) for m in r.smembers(keys.inprogress_ids())}

    ledger.start(work, "t")
    fetcher.ack(r, work.raw)
    fetcher.after_beat(r, ledger)
    assert fetcher.retired is None
    assert OLD not in {raw_text(m) for m in r.smembers(keys.inprogress_ids())}
    assert not r.hexists(keys.last_beat(), OLD)
    assert NEW in {raw_text(m) for m in r.smembers(keys.inprogress_ids())}


def test_a_fetch_out_at_the_rename_keeps_the_old_identity_until_it_is_back(fetcher, r):
    """A fetch sent before the swap of names may yet land a job on an old list: the old
    identity is not forgotten while it is out, and its jobs are known to be there."""
    ledger = Ledger()
    ledger.fetch_out(7)  # out, its reply not yet back
    fetcher.rename(r, NEW, ledger)
    fetcher.after_beat(r, ledger)
    assert fetcher.retired is not None  # the fetch is still out

    # Its script ran with the old list's name (it was sent before the swap).
    tj.record.enqueue("t1")
    (raw,) = r.lrange(keys.queue("default"), 0, -1)
    r.lmove(keys.queue("default"), keys.inprogress(OLD, home()), "RIGHT", "LEFT")
    fetcher.retired.took([raw_text(raw)], keys.inprogress(OLD, home()))
    ledger.fetched(7, [])
    fetcher.after_beat(r, ledger)
    assert fetcher.retired is not None  # its job is on the old list
    assert fetcher.settle_keys(raw_text(raw))[0] == keys.inprogress(OLD, home())


def test_a_lost_reply_on_an_old_list_is_requeued(fetcher, r):
    """A job on the old list that the process does not know (a fetch whose reply was
    lost) is requeued by the reconcile, as on its current lists."""
    ledger = Ledger()
    fetcher.rename(r, NEW, ledger)
    tj.record.enqueue("t1")
    r.lmove(keys.queue("default"), keys.inprogress(OLD, home()), "RIGHT", "LEFT")
    fetcher.after_beat(r, ledger)  # unknown once
    fetcher.after_beat(r, ledger)  # unknown twice: requeued
    assert r.llen(keys.queue("default")) == 1
    assert listed(r, OLD) == []
    fetcher.after_beat(r, ledger)
    assert fetcher.retired is None


def test_the_hand_over_settles_both_identities_lists(fetcher, r):
    ledger = Ledger()
    tj.record.enqueue_many([("a",), ("b",)])
    old_one = take(fetcher, r, ledger, 1)
    fetcher.rename(r, NEW, ledger)
    new_one = take(fetcher, r, ledger, 2)
    assert listed(r, OLD) == [old_one.raw] and listed(r, NEW) == [new_one.raw]
    fetcher.hand_over(r, ledger)  # neither started: both back on their queue
    assert listed(r, OLD) == [] and listed(r, NEW) == []
    assert r.llen(keys.queue("default")) == 2
    fetcher.forget(r)
    ids = {raw_text(m) for m in r.smembers(keys.inprogress_ids())}
    assert OLD not in ids and NEW not in ids


def test_every_part_of_a_worker_carries_on_under_the_new_identity(inworker, r, prefix):
    """The launcher's rename (what the heartbeat calls once fenced), on an in-process
    worker: the fetch, the heartbeat's presence and signals channel, orphan recovery's
    own identity, the leases it takes, the history rows and the ticker follow it; the
    old identity leaves the admin's list; jobs run on."""
    from cogworker_django import history
    from cogworker_django.store import runtime

    w = inworker()
    old = w.identity
    new = w.launcher._reidentify()
    assert new != old and w.identity == new
    launcher = w.launcher
    assert launcher.fetcher.identity == launcher.heartbeat.identity == new
    assert launcher.recovery.identity == launcher.manager.identity == new
    assert runtime.current().identity == new
    if history.enabled():
        assert history.buffer.worker == new
    assert old not in r.smembers(keys.processes())
    launcher.heartbeat.beat()
    assert new in r.smembers(keys.processes())
    assert json.loads(r.hget(keys.process(new), "info"))["identity"] == new
    # The admin's signals reach it on the new identity's channel.
    wait_until(lambda: r.pubsub_numsub(keys.signal(new))[0][1] == 1, 5, message="subscribed anew")
    assert old not in r.smembers(keys.inprogress_ids())  # nothing was on its list
    tj.record.enqueue("after")
    w.run_until(lambda: r.hget(f"{prefix}:test:runs", "after") == "1", 10, "the job ran")
    w.stop()
    assert new not in r.smembers(keys.inprogress_ids())


def _beat_after(w, r, *deleted: str) -> None:
    """Delete ``deleted`` ("presence", "stamp"), then beat (the heartbeat's own thread
    stopped: the test's beats are the only ones)."""
    ident = w.identity
    if "presence" in deleted:
        r.delete(keys.process(ident))
    if "stamp" in deleted:
        r.hdel(keys.last_beat(), ident)
    w.launcher.heartbeat.beat()


def test_a_stamp_dropped_beside_a_presence_fences_nothing(inworker, r, caplog):
    """The key guard moving the stamps' hash aside drops every stamp, yet nobody was
    recovered: the presence is still there, so the beat neither fences nor renames."""
    w = inworker()
    w.launcher.heartbeat.stop()
    first = w.identity
    _beat_after(w, r)
    _beat_after(w, r, "stamp")
    _beat_after(w, r)
    assert w.identity == first
    assert "taken for dead" not in caplog.text


@pytest.mark.parametrize("split", [False, True], ids=["one-beat", "two-beats"])
def test_a_presence_and_stamp_dropped_by_recovery_rename_the_process(inworker, r, caplog, split):
    """Recovery deletes a dead process's presence, then its stamp: the beat that finds
    both gone fences and renames, and so does the next one when the two deletes landed
    astride one beat (its HSET before the first, its stamp after the second)."""
    w = inworker()
    w.launcher.heartbeat.stop()
    first = w.identity
    _beat_after(w, r)
    if split:
        _beat_after(w, r, "presence")
        assert w.identity == first
        _beat_after(w, r, "stamp")
    else:
        _beat_after(w, r, "presence", "stamp")
    assert w.identity != first
    assert f"this process ({first}) was taken for dead" in caplog.text
    assert f"carrying on as {w.identity}" in caplog.text
