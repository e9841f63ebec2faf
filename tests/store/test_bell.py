"""Doorbells (store/bell.py): a push that finds its queue's list empty rings the queue's
bell; one that finds jobs waiting does not; a bell never grows past its bound, and a
bell of the wrong type never fails a push."""

from __future__ import annotations

import pytest
from testapp import jobs

from cogworker_django.store import bell, keys


def test_a_push_onto_an_empty_queue_rings_its_bell_once(configure, r):
    jobs.noop.enqueue()
    assert r.llen(keys.bell("default")) == 1
    jobs.noop.enqueue()  # jobs wait already: no idle worker to wake
    jobs.noop.enqueue()
    assert r.llen(keys.bell("default")) == 1


def test_a_bulk_push_onto_an_empty_queue_rings_once(configure, r):
    jobs.noop.enqueue_many([() for _ in range(5)])
    assert r.llen(keys.bell("default")) == 1
    jobs.noop.enqueue_many([() for _ in range(5)])
    assert r.llen(keys.bell("default")) == 1


def test_a_unique_push_onto_an_empty_queue_rings(configure, r):
    jobs.noop.using(unique="until_executed").enqueue()
    assert r.llen(keys.bell("default")) == 1


def test_a_scheduled_push_rings_nothing_until_it_comes_due(configure, r):
    jobs.noop.enqueue_in(60)
    assert r.llen(keys.bell("default")) == 0


def test_a_bell_keeps_at_most_its_bound(configure, r):
    for _ in range(bell.KEEP + 10):
        r.delete(keys.queue("default"))
        jobs.noop.enqueue()
    assert r.llen(keys.bell("default")) == bell.KEEP


def test_a_bell_of_the_wrong_type_never_fails_a_push(configure, r):
    r.set(keys.bell("default"), "not a list")
    jid = jobs.noop.enqueue()
    assert r.llen(keys.queue("default")) == 1 and jid
    r.delete(keys.queue("default"))
    jobs.noop.using(unique="until_executed").enqueue()  # through lua/include/place.lua
    assert r.llen(keys.queue("default")) == 1


@pytest.mark.cluster
@pytest.mark.spread
def test_bells_ring_on_a_cluster_too(configure, r, redis_mode):
    """Every mode, and a home per queue: the bell is in its queue's slot."""
    jobs.noop.enqueue()
    jobs.noop.using(queue="other").enqueue_many([() for _ in range(3)])
    jobs.noop.using(queue="third", unique="until_executed").enqueue()
    assert [r.llen(keys.bell(q)) for q in ("default", "other", "third")] == [1, 1, 1]
