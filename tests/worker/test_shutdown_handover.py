"""The shutdown hand-over and the runs still going during it agree on who settles each
run: its processor (ack, retry, dead) or the hand-over (requeue), never both; a run
requeued while it went on releases none of the locks its requeued copy now holds; and a
job a fetch returns after the stop began is requeued, not run nor left listed.

These drive one worker's Manager in this process (real processor threads, real Redis),
so the test decides exactly when a run ends relative to the hand-over.
"""

from __future__ import annotations

import threading
import time

import pytest
from testapp import jobs as tj

from cogworker_django import conf
from cogworker_django.core import payload
from cogworker_django.store import keys
from cogworker_django.worker.fetch import ReliableFetch, Work
from cogworker_django.worker.ledger import REFUSED, Ledger
from cogworker_django.worker.manager import Manager

from ..helpers import wait_until

IDENTITY = "handover-test:1:abcd"


@pytest.fixture
def manager(configure):
    configure(HISTORY=False)
    m = Manager(IDENTITY, ReliableFetch(IDENTITY, conf.get().QUEUES), 1)
    yield m
    m.quiet()
    for gate in tj.gates.values():
        gate.set()
    for p in m.processors:
        if p.thread is not None:
            p.thread.join(5)
    tj.gates.clear()
    tj.entered.clear()


def runs(r) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{keys.prefix()}:test:runs").items()}


@pytest.mark.parametrize("fail", [False, True], ids=["succeeds", "fails"])
def test_a_run_ending_after_the_hand_over_settles_nothing_and_keeps_its_lock(manager, r, fail):
    jid = tj.wait_at_gate.using(unique="until_executed").enqueue("g", fail=fail)
    (lock,) = r.keys(f"{keys.prefix()}:unique:*")
    manager.start()
    tj.gate("g")
    assert tj.entered["g"].wait(10), "the run never started"
    manager.stop(0.2, threading.Event())  # past the shutdown timeout: requeued
    (requeued,) = r.lrange(keys.queue("default"), 0, -1)
    assert payload.decode(requeued)["jid"] == jid
    assert r.llen(keys.inprogress(IDENTITY, keys.home_of("default"))) == 0

    tj.gates["g"].set()  # the run ends now, after the hand-over
    manager.processors[0].thread.join(10)
    assert runs(r) == {"g": 1}
    assert (
        r.zcard(keys.retry(keys.home_of("default"))) == 0
        and r.zcard(keys.dead(keys.home_of("default"))) == 0
    )
    assert r.llen(keys.queue("default")) == 1  # the requeued copy alone, not acked away
    assert r.get(lock) == jid  # the requeued copy's lock, not released by this run


class StopDuringFetch(ReliableFetch):
    """Real fetches, except that the stop begins while one that takes a job is in flight
    (as when Redis answers slowly: a failover, CLIENT PAUSE)."""

    manager: Manager | None = None

    def fetch_many(self, conn, acks, wanted, ends=(), kinds=None):
        works = super().fetch_many(conn, acks, wanted, ends, kinds)
        if works and self.manager is not None:
            self.manager.control.stopping.set()  # before the reply reached the processor
        return works


def test_a_job_fetched_after_the_stop_began_is_requeued_not_run(configure, r):
    configure(HISTORY=False)
    fetcher = StopDuringFetch(IDENTITY, conf.get().QUEUES)
    m = fetcher.manager = Manager(IDENTITY, fetcher, 1)
    m.start()
    jid = tj.record.enqueue("late")
    wait_until(lambda: m.control.stopping.is_set(), 10, message="the fetch of the job")
    m.stop(0.2, threading.Event())
    m.processors[0].thread.join(5)
    assert runs(r) == {}
    (requeued,) = r.lrange(keys.queue("default"), 0, -1)
    assert payload.decode(requeued)["jid"] == jid
    # It never ran: not counted as interrupted (tests/worker/test_reliable_shutdown.py).
    assert "orphan_count" not in payload.decode(requeued)
    assert r.llen(keys.inprogress(IDENTITY, keys.home_of("default"))) == 0


def test_the_hand_over_waits_for_claimed_settlements_and_refuses_later_ones():
    ledger = Ledger()
    early, late = Work("default", "early"), Work("default", "late")
    ledger.start(early, "processor-0")
    ledger.start(late, "processor-1")
    assert ledger.performed(early)  # claimed: settling
    begun = threading.Event()
    left: list[int] = []

    def hand_over():
        begun.set()
        left.append(ledger.begin_hand_over(5))

    t = threading.Thread(target=hand_over)
    t.start()
    begun.wait(5)
    time.sleep(0.2)
    assert left == []  # still waiting for the early run to settle
    assert not ledger.performed(late) and late.state == REFUSED  # to its requeued copy
    ledger.succeeded(early)
    t.join(5)
    assert left == [0]
    assert ledger.performed(Work("default", "later")) is False
    assert Ledger().begin_hand_over(0.1) == 0
