"""The ledger (worker/ledger.py), each transition of its state table (docs/internals.md,
"The ledger"), driven through its methods only: what each state allows and refuses, the
snapshot the reconcile reads, the hand-over's refusals, the lock refresh's ordering.
Nothing here needs Redis: the ledger is the process's own record."""

from __future__ import annotations

import threading
import time

from cogworker_django.worker.ledger import (
    ABANDONED,
    ACK,
    ACKING,
    FETCHED,
    PENDING,
    PERFORMING,
    REFUSED,
    SETTLING,
    Filing,
    Ledger,
    Work,
)


def fetched(ledger: Ledger, *raws: str, number: int = 1) -> list[Work]:
    works = [Work("default", raw) for raw in raws]
    ledger.fetch_out(number)
    ledger.fetched(number, works)
    return works


def test_a_fetch_is_out_until_its_jobs_enter_in_the_same_step():
    ledger = Ledger()
    ledger.fetch_out(7)
    assert ledger.snapshot().fetches_out == {7} and ledger.snapshot().known == set()
    (a,) = works = [Work("default", "a")]
    ledger.fetched(7, works)
    snap = ledger.snapshot()
    assert snap.fetches_out == set() and snap.known == {"a"} and a.state == FETCHED
    ledger.fetch_out(8)
    ledger.fetched(8, ())  # a fetch that failed: out no more, nothing entered
    assert ledger.snapshot().fetches_out == set()


def test_a_run_from_its_start_to_its_ack():
    ledger = Ledger()
    (a,) = fetched(ledger, "a")
    ledger.start(a, "processor-0")
    assert a.state == PERFORMING and ledger.performing() == ["a"] and ledger.busy() == 1
    assert "processor-0" in ledger.board()
    assert ledger.performed(a) and a.state == SETTLING
    assert ledger.performed(a)  # idempotent: still its claim
    assert ledger.performing() == [] and ledger.busy() == 1
    ledger.succeeded(a, ended="kept")
    assert a.state == ACK and a.ended == "kept" and ledger.has_acks() and ledger.busy() == 0
    assert ledger.take_acks() == [a] and a.state == ACKING and not ledger.has_acks()
    assert ledger.pending() == []  # on a fetch: not the heartbeat's
    ledger.acks_sent([a])
    assert a.state == "" and ledger.snapshot().known == set()


def test_an_ack_whose_fetch_failed_is_pending_for_the_heartbeat():
    ledger = Ledger()
    (a,) = fetched(ledger, "a")
    ledger.start(a, "processor-0")
    ledger.performed(a)
    ledger.succeeded(a)
    acks = ledger.take_acks()
    ledger.acks_failed(acks)
    assert a.state == PENDING and ledger.pending() == [a] and a.filing is None
    ledger.settled(a)  # the heartbeat acked it
    assert ledger.pending() == [] and a.state == ""


def test_a_filing_redis_refused_is_pending_with_its_filing():
    ledger = Ledger()
    (a,) = fetched(ledger, "a")
    ledger.start(a, "processor-0")
    ledger.performed(a)
    filing = Filing("retry", time.time() + 10, "{}")
    ledger.file_later(a, filing, ended="retrying")
    assert a.state == PENDING and a.filing is filing and a.ended == "retrying"
    assert ledger.pending() == [a] and "a" in ledger.snapshot().known


def test_the_watchdog_abandons_only_a_run_inside_its_job():
    ledger = Ledger()
    stuck, done = fetched(ledger, "stuck", "done")
    assert not ledger.abandon(stuck)  # not started: nothing to abandon
    ledger.start(stuck, "processor-0")
    ledger.start(done, "processor-1")
    ledger.performed(done)
    assert not ledger.abandon(done)  # claimed its own settlement first
    assert ledger.abandon(stuck) and stuck.state == ABANDONED
    assert ledger.performing() == []  # its locks are no longer kept alive
    assert not ledger.performed(stuck)  # its thread, back: refused
    ledger.left(stuck)  # and its leaving changes nothing
    assert stuck.state == ABANDONED and stuck in ledger.running()
    ledger.settled(stuck)  # the watchdog's filing
    assert stuck.state == "" and stuck not in ledger.running()


def test_the_hand_over_waits_for_settling_runs_and_refuses_later_claims():
    ledger = Ledger()
    early, late, never = fetched(ledger, "early", "late", "never")
    for work in (early, late):
        ledger.start(work, "t")
    ledger.performed(early)
    left: list[int] = []
    t = threading.Thread(target=lambda: left.append(ledger.begin_hand_over(5)))
    t.start()
    time.sleep(0.2)
    assert left == [] and ledger.handing_over
    assert not ledger.performed(late) and late.state == REFUSED
    assert not ledger.abandon(late)
    ledger.succeeded(early)
    t.join(5)
    assert left == [0]
    assert never.state == FETCHED  # left for the hand-over
    assert Ledger().begin_hand_over(0.1) == 0


def test_a_run_whose_thread_died_is_kept_refused_for_the_hand_over():
    ledger = Ledger()
    (a,) = fetched(ledger, "a")
    ledger.start(a, "processor-0")
    ledger.left(a)
    assert a.state == REFUSED and ledger.performing() == [] and "a" in ledger.snapshot().known
    ledger.handed_over([a])
    assert ledger.snapshot().known == set()


def test_given_back_jobs_leave_the_ledger():
    ledger = Ledger()
    a, b = fetched(ledger, "a", "b")
    ledger.given_back([a])
    assert ledger.works(FETCHED) == [b] and a.state == ""


def test_two_copies_of_one_payload_are_two_runs():
    ledger = Ledger()
    one, two = fetched(ledger, "same", "same")
    ledger.start(one, "p0")
    ledger.start(two, "p1")
    ledger.performed(one)
    assert ledger.performing() == ["same"]  # the other copy still inside its job
    ledger.performed(two)
    assert ledger.performing() == []


def test_a_lock_refresh_in_flight_holds_the_end_of_perform():
    ledger = Ledger()
    (a,) = fetched(ledger, "a")
    ledger.start(a, "p0")
    entered, release, order = threading.Event(), threading.Event(), []

    def refresh():
        with ledger.while_performing("a") as still:
            entered.set()
            release.wait(5)
            order.append(("refresh", still))

    t = threading.Thread(target=refresh)
    t.start()
    assert entered.wait(5)
    u = threading.Thread(target=lambda: (ledger.performed(a), order.append(("end", None))))
    u.start()
    time.sleep(0.2)
    assert order == []  # the run's end waits for the refresh
    release.set()
    t.join(5)
    u.join(5)
    assert order == [("refresh", True), ("end", None)]
    with ledger.while_performing("a") as still:
        assert still is False
