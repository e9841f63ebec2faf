"""api.find_job (where one jid is now, everywhere) and Queue.delete (one queued job)."""

from __future__ import annotations

import pytest

from cogworker_django import history
from cogworker_django.api import Outcome, Queue, find_job
from cogworker_django.core import payload
from cogworker_django.store import keys

from ..api_support import add_to, make_job, push, unique_job

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]


def test_a_jid_is_found_in_every_place_it_is(r):
    job = make_job("shop.jobs.charge", 7, queue="billing")
    jid = job["jid"]
    push(r, job)
    add_to(r, "schedule", job)
    add_to(r, "retry", {**job, "retry_count": 1})
    add_to(r, "dead", {**job, "error_class": "E"})
    r.sadd(keys.inprogress_ids(), "gone:1:aa", "alive:2:bb")
    r.lpush(keys.inprogress("gone:1:aa", keys.home_of("default")), payload.encode(job))
    r.lpush(keys.inprogress("alive:2:bb", keys.home_of("default")), payload.encode(make_job()))
    r.hset(keys.process("alive:2:bb"), "info", "{}")
    mw = history.HistoryMiddleware()
    with pytest.raises(ValueError):
        mw(job, "billing", _raise(ValueError("first attempt")))
    mw(make_job(), "default", lambda: None)  # another job's run
    history.flush()
    try:
        found = find_job(f"  {jid} ")
    finally:
        history.buffer.clear()
    assert [f.where for f in found] == [
        "queue",
        "schedule",
        "inprogress",
        "retry",
        "dead",
        "history",
    ]
    assert all(f.record.jid == jid for f in found if f.record is not None)
    assert found[0].queue == "billing"
    assert found[2].identity == "gone:1:aa" and found[2].alive is False
    assert found[-1].run.jid == jid and found[-1].run.status == "failed"
    # In a shell, what was found reads as what it is (not Run() or a payload's bytes).
    run = repr(found[-1].run)
    assert run.startswith(f"Run(jid={jid!r}, job='shop.jobs.charge', queue='billing', ")
    assert "status='failed'" in run and "error='ValueError: first attempt'" in run
    assert "duration=" in run and "started_at=datetime.datetime(" in run
    assert repr(found[0].record) == (
        f"JobRecord(jid={jid!r}, func='shop.jobs.charge', queue='billing', source='queue')"
    )
    assert f"run=Run(jid={jid!r}" in repr(found[-1])
    assert f"record=JobRecord(jid={jid!r}" in repr(found[4]) and "score=" in repr(found[4])


def test_a_jid_found_nowhere_and_a_bad_jid(r):
    push(r, make_job())
    assert find_job("0" * 24) == []
    for bad in ("", "   ", 'a"b', "x" * 101, "two words"):
        with pytest.raises(ValueError):
            find_job(bad)


def test_delete_one_queued_job_releases_its_lock(r):
    keep, drop = make_job("a.b", 1, queue="q"), unique_job(r, "a.b", 2, queue="q")
    push(r, keep)
    push(r, drop)
    queue = Queue("q")
    record = queue.get([x for x in queue.jobs(0, 10) if x.jid == drop["jid"]][0].key, drop["jid"])
    assert record is not None
    assert queue.delete(record) == Outcome.DONE
    assert [x.jid for x in queue.jobs(0, 10)] == [keep["jid"]]
    assert not r.exists(keys.unique(drop["unique_digest"], keys.home_of("q")))
    assert queue.delete(record) == Outcome.GONE  # already gone: nothing else removed
    assert queue.size() == 1


def test_delete_removes_one_copy_of_a_job_listed_twice(r):
    job = make_job(queue="q")
    push(r, job)
    push(r, job)
    record = Queue("q").jobs(0, 1)[0]
    assert Queue("q").delete(record) == Outcome.DONE
    assert Queue("q").size() == 1
    assert Queue("q").get("0.0|nope", job["jid"]) is None


def _raise(exc):
    def run():
        raise exc

    return run


def test_a_key_of_the_wrong_type_is_skipped_not_fatal(r):
    job = make_job(queue="good")
    push(r, job)
    r.sadd(keys.queues(), "broken")
    r.set(keys.queue("broken"), "oops")
    r.set(keys.dead(keys.home_of("default")), "oops")
    assert [f.where for f in find_job(job["jid"])] == ["queue"]
