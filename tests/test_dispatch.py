"""The dispatcher in this process (real Redis, real fetch script, real threads): one
fetch serves the threads waiting for it, every pending ack rides with the next fetch,
quiet and stop end the waiting, a failed fetch leaves its acks pending, and jobs
fetched but not taken stay known and listed."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from cogworker_django import conf, connection, keys, payload
from cogworker_django.conf import QueueSpec
from cogworker_django.worker.dispatch import Dispatcher
from cogworker_django.worker.fetch import ReliableFetch
from cogworker_django.worker.record import ACK, Control, Record

IDENTITY = "dispatch-test:1:abcd"


class Counting(ReliableFetch):
    """The real strategy, counting its round trips (and what each carried)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[int, int]] = []  # (acks, wanted)
        self.gate: threading.Event | None = None

    def fetch_many(self, conn, acks, count):
        self.calls.append((len(acks), count))
        if self.gate is not None:
            self.gate.wait(5)
        return super().fetch_many(conn, acks, count)


@pytest.fixture
def parts():
    strategy = Counting(IDENTITY, (QueueSpec("default", 1),))
    record, control = Record(), Control(conf.get().FETCH_IDLE_MAX_INTERVAL)
    return strategy, record, control, Dispatcher(strategy, record, control, 4)


def push(*tokens: str) -> list[str]:
    jobs = [payload.build("testapp.jobs.record", [t], queue="default") for t in tokens]
    conn = connection.get_client()
    for job in jobs:
        conn.lpush(keys.queue("default"), payload.encode(job))
    return [j["jid"] for j in jobs]


def jid_of(work) -> str:
    return payload.decode(work.raw)["jid"]


def test_threads_that_come_free_during_a_fetch_start_their_own_up_to_the_limit(parts, r):
    strategy, _record, _control, d = parts
    push(*"abcdef")
    conn = connection.get_client()
    strategy.gate = threading.Event()
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(d.next(conn, None))) for _ in range(5)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while len(strategy.calls) < d.max_in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    # As many fetches as allowed went out at once, each for its own thread; the other
    # threads wait for one to come back.
    assert d.max_in_flight == 3 and strategy.calls == [(0, 1)] * 3
    strategy.gate.set()
    for t in threads:
        t.join(5)
    assert len([w for w in got if w is not None]) == 5
    assert sum(wanted for _, wanted in strategy.calls) >= 5


def test_a_fetch_takes_a_job_for_each_thread_then_waiting(parts, r):
    strategy, record, control, d = parts
    d.max_in_flight = 1  # one fetch at a time: the waiters share the next one
    push("a", "b", "c")
    conn = connection.get_client()
    strategy.gate = threading.Event()
    got: list = []
    first = threading.Thread(target=lambda: got.append(d.next(conn, None)))
    first.start()
    while not strategy.calls:
        time.sleep(0.01)
    # Two more threads arrive while the first one's fetch is under way.
    others = [threading.Thread(target=lambda: got.append(d.next(conn, None))) for _ in range(2)]
    for t in others:
        t.start()
    time.sleep(0.3)
    strategy.gate.set()
    for t in (first, *others):
        t.join(5)
    # The first fetch wanted one job; the next one, made by a thread that waited
    # through it, wanted one for itself and one for the thread still waiting.
    assert strategy.calls == [(0, 1), (0, 2)]
    assert sorted(jid_of(w) for w in got) == sorted(
        payload.decode(x)["jid"] for x in r.lrange(keys.inprogress(IDENTITY), 0, -1)
    )
    assert len(got) == 3


def test_acks_ride_with_the_next_fetch_and_settle_the_record(parts, r):
    strategy, record, _control, d = parts
    push("a", "b")
    conn = connection.get_client()
    first = d.next(conn, None)
    record.started(first)
    record.settle_later(first.raw, ACK)
    second = d.next(conn, first)  # hands in the finished job
    assert strategy.calls == [(0, 1), (1, 1)]
    listed = [payload.decode(x)["jid"] for x in r.lrange(keys.inprogress(IDENTITY), 0, -1)]
    assert listed == [jid_of(second)]
    assert record.pending() == {} and first.raw not in record.running_raws()


def test_quiet_and_stop_end_the_wait_and_stop_keeps_fetched_jobs_listed(parts, r):
    strategy, record, control, d = parts
    push("a", "b", "c")
    conn = connection.get_client()
    d.next(conn, None)
    # Jobs fetched for threads that never came for them (another thread's fetch).
    d._ready.extend(strategy.fetch_many(conn, [], 2))  # noqa: SLF001 - set the scene
    assert len(d.known()) == 2
    control.stopping.set()
    assert d.next(conn, None) is None  # not handed out: the hand-over requeues them
    assert len(d.known()) == 2 and r.llen(keys.inprogress(IDENTITY)) == 3
    calls = len(strategy.calls)
    control.quiet.set()
    assert d.next(conn, None) is None
    assert len(strategy.calls) == calls


def test_a_failed_fetch_leaves_its_acks_pending_and_lets_a_waiter_fetch(
    parts, r, redis_server, configure
):
    strategy, record, _control, d = parts
    server = redis_server()
    configure(REDIS_URL=server.url)
    conn = connection.get_client()
    job = payload.build("testapp.jobs.record", ["a"], queue="default")
    conn.lpush(keys.queue("default"), payload.encode(job))
    work = d.next(conn, None)
    record.started(work)
    record.settle_later(work.raw, ACK)
    server.stop()
    with pytest.raises(redis.ConnectionError):
        d.next(conn, work)
    assert record.pending() == {work.raw: ACK}  # the heartbeat acks it
    assert work.raw not in record.running_raws()
    assert d._in_flight == 0  # noqa: SLF001 - the next caller fetches


def test_give_back_and_flush(parts, r):
    strategy, record, _control, d = parts
    push("a", "b")
    conn = connection.get_client()
    a = d.next(conn, None)
    assert d.give_back(a) is True and d.known() == {a.raw}
    assert d.next(conn, None) == a  # handed out again (not stopping)
    record.started(a)
    record.settle_later(a.raw, ACK)
    d._acks.append(a)  # noqa: SLF001 - handed in after the last fetch
    d.flush(conn)
    assert strategy.calls[-1] == (1, 0)
    assert record.pending() == {} and r.llen(keys.inprogress(IDENTITY)) == 0
