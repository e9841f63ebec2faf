"""The limiter waker on its own (real Redis, no worker): one look moves as many of the
oldest waiting jobs as the limiter has room for, whatever the length of the line; a
full rate window says how long until it has room; an index entry whose job left the
schedule (cancelled, or brought back by its fallback) is dropped."""

from __future__ import annotations

import time

import pytest

from cogworker_django import api
from cogworker_django.controls import limits
from cogworker_django.core import payload
from cogworker_django.store import keys, runtime
from cogworker_django.worker.limit_waker import LimitWaker

pytestmark = [pytest.mark.cluster, pytest.mark.spread]

LIMITS = {"test-pair": {"concurrency": 2}, "test-rate": {"rate": 3, "per": 2}}


def park(r, name: str, n: int, func: str = "testapp.jobs.limited_pair") -> list[str]:
    home = keys.home_of("default")
    filed = []
    for i in range(n):
        job = payload.build(func, [1.0, f"w{i}"], queue="default")
        raw = payload.encode(job)
        r.zadd(keys.schedule(home), {raw: 4e9})  # its fallback: far away
        filed.append(raw)
    # (one ZADD per key: the index is in the prefix's slot, the schedule in the queue's)
    r.zadd(keys.limit_waiting(name), {raw: i for i, raw in enumerate(filed)})
    return filed


def queued(r) -> list[dict]:
    return [payload.decode(raw) for raw in r.lrange(keys.queue("default"), 0, -1)]


def test_one_look_moves_as_many_as_there_is_room_for_oldest_first(configure, r):
    configure(LIMITS=LIMITS)
    filed = park(r, "test-pair", 1000)
    held = limits.take(["test-pair"], {"jid": "busy", "func": "x"})  # one slot of two
    try:
        LimitWaker().look()
        moved = queued(r)
        assert [j["args"][1] for j in moved] == ["w0"]
        assert r.zcard(keys.limit_waiting("test-pair")) == 999
        assert r.zcard(keys.schedule(keys.home_of("default"))) == 999
        assert filed[0] not in r.zrange(keys.limit_waiting("test-pair"), 0, -1)
        # A look while the moved job has not taken its room yet moves none: it holds
        # the room until a processor fetches it.
        LimitWaker().look()
        assert len(queued(r)) == 1
        second = limits.take(["test-pair"], moved[0])  # fetched: its room is a lease now
        LimitWaker().look()
        assert len(queued(r)) == 1
        limits.release(second)
    finally:
        limits.release(held)
    assert api.Limits().get("test-pair").waiting == 999


def test_a_full_rate_window_says_when_it_has_room(configure, r):
    configure(LIMITS=LIMITS, POLL_INTERVAL=5.0)
    park(r, "test-rate", 10, func="testapp.jobs.limited_rate")
    for _ in range(3):
        assert isinstance(limits.take(["test-rate"], None), limits.Lease)
    pause = LimitWaker().look(("test-rate",))
    assert 1.5 < pause <= 2.0
    assert queued(r) == []


def test_an_index_entry_whose_job_left_the_schedule_is_dropped(configure, r):
    configure(LIMITS=LIMITS)
    [gone, kept] = park(r, "test-pair", 2)
    r.zrem(keys.schedule(keys.home_of("default")), gone)  # cancelled meanwhile
    LimitWaker().look()
    assert r.zcard(keys.limit_waiting("test-pair")) == 0
    assert [j["args"][1] for j in queued(r)] == ["w1"]


def test_a_released_lease_wakes_the_oldest_waiting_job_on_the_releasing_thread(configure, r):
    configure(LIMITS=LIMITS)
    park(r, "test-pair", 3)
    a = limits.take(["test-pair"], {"jid": "a", "func": "x"})
    b = limits.take(["test-pair"], {"jid": "b", "func": "x"})
    waker = LimitWaker()
    runtime.current().limit_wake = waker.wake_for  # as the Controls plugin sets it
    limits.release(a)
    assert [j["args"][1] for j in queued(r)] == ["w0"]
    runtime.current().limit_wake = None
    limits.release(b)


def test_a_backed_up_queue_does_not_draw_the_whole_waiting_set_into_it(configure, r):
    """Jobs moved to a queue that other jobs hold up keep their room until a processor
    takes them (a lease, or a refusal), or until the hold passes: looks in between move
    nothing more, however many."""
    from cogworker_django.worker import limit_waker

    configure(LIMITS=LIMITS, POLL_INTERVAL=1.0)
    park(r, "test-pair", 50)
    for _ in range(20):
        LimitWaker().look()
    moved = queued(r)
    assert len(moved) == 2  # the limit's room, not the line's length
    assert r.zcard(keys.limit_waiting("test-pair")) == 48
    # A processor takes the oldest: its lease holds the room now, the other's offer too.
    lease = limits.take(["test-pair"], moved[-1])
    assert isinstance(lease, limits.Lease)
    LimitWaker().look()
    assert len(queued(r)) == 2
    limits.release(lease)  # done: one room free again, offered to the next waiting job
    LimitWaker().look()
    assert len(queued(r)) == 3
    # A moved job fetched by a process that died: its offer lapses after the hold.
    time.sleep(limit_waker.hold() + 0.2)
    LimitWaker().look()
    assert len(queued(r)) == 5


def test_a_refused_moved_job_gives_its_offer_back(configure, r):
    configure(LIMITS=LIMITS)
    park(r, "test-pair", 3)
    a = limits.take(["test-pair"], {"jid": "a", "func": "x"})
    LimitWaker().look()
    [moved] = queued(r)
    b = limits.take(["test-pair"], {"jid": "b", "func": "x"})  # another took the room
    assert isinstance(limits.take(["test-pair"], moved), limits.Refusal)
    assert r.zcard(keys.limit_offered("test-pair")) == 0
    limits.release(a)
    limits.release(b)
    LimitWaker().look()
    assert len(queued(r)) == 3  # both rooms offered again (nothing re-parked the refused one)
