"""Unique jobs under the testing helpers: ``fake()`` refuses duplicates like a real push
(without Redis: in memory, while the first is recorded); ``inline()`` runs each at once."""

from testapp import jobs as tj

from cogworker_django import testing
from cogworker_django.store import keys

UE = tj.record.using(unique="until_executed")
US = tj.record.using(unique="until_started")
WE = tj.record.using(unique="while_executing")


def test_fake_refuses_a_duplicate_while_the_first_is_recorded(r):
    with testing.fake():
        jid = UE.enqueue("a")
        assert jid is not None
        assert UE.enqueue("a") is None
        assert US.enqueue("a") is None  # same digest, also locked from the push
        assert UE.enqueue("b") is not None
        assert UE.using(queue="low").enqueue("a") is not None
        assert [j["jid"] for j in tj.record.jobs][0] == jid and len(tj.record.jobs) == 3
        tj.record.drain()
        assert UE.enqueue("a") is not None  # performed: accepted again
    assert r.llen(keys.queue("default")) == 0 and not list(
        r.scan_iter(keys.unique("*", keys.home_of("default")))
    )


def test_fake_enqueue_many_returns_none_for_duplicates():
    with testing.fake():
        first = UE.enqueue(1)
        out = UE.enqueue_many([(1,), (2,), (2,)])
        assert first and out[0] is None and out[1] and out[2] is None
        assert len(tj.record.jobs) == 2


def test_fake_clear_forgets_the_locks():
    with testing.fake():
        UE.enqueue("a")
        tj.record.clear()
        assert UE.enqueue("a") is not None


def test_fake_never_refuses_while_executing_or_plain_jobs():
    with testing.fake():
        assert WE.enqueue("a") and WE.enqueue("a")
        assert tj.record.enqueue("a") and tj.record.enqueue("a")
        assert len(tj.record.jobs) == 4


def test_inline_runs_every_enqueue(r, prefix):
    with testing.inline():
        assert UE.enqueue("tok") is not None
        assert UE.enqueue("tok") is not None
    assert r.hget(f"{prefix}:test:runs", "tok") == "2"
