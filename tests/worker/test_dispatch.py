"""Reliable fetch's dispatcher in this process (real Redis, the real fetch script, a real
feeder thread and real waiting threads): a thread that finds the fetch role free fetches
for itself, one fetch serves every thread free when it goes out, every pending ack rides
with the next fetch, no job is fetched for a busy thread, quiet and stop end the waiting,
a failed fetch leaves its acks pending, a fetch that returns after the stop began hands
out nothing, and jobs fetched but not taken stay known and listed."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis

from cogworker_django import conf
from cogworker_django.conf import QueueSpec
from cogworker_django.core import payload
from cogworker_django.store import connection, keys
from cogworker_django.worker.dispatch import FETCHES_OUT, SECOND_FETCH_FROM, Dispatcher
from cogworker_django.worker.fetch import ReliableFetch
from cogworker_django.worker.ledger import ACK, FETCHED, PENDING, Control, Ledger

IDENTITY = "dispatch-test:1:abcd"


class Counting(ReliableFetch):
    """The real strategy, counting its round trips (and what each carried); ``gate``
    holds a fetch back until set, ``fail`` raises instead of the next fetches,
    ``fail_call`` instead of the fetch of that number (counted as they are sent)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[int, int]] = []  # (acks, wanted)
        self.gate: threading.Event | None = None
        self.fail: list[BaseException] = []
        self.fail_call: dict[int, BaseException] = {}  # call number (from 1) -> raise
        # Set: a fetch that ran in Redis waits for it before returning (a held-up reply).
        self.reply_gate: threading.Event | None = None
        self.fail_give_back: list[BaseException] = []

    def fetch_many(self, conn, acks, count, ends=(), kinds=None):
        self.calls.append((len(acks), count))
        number = len(self.calls)
        if self.gate is not None:
            self.gate.wait(5)
        if number in self.fail_call:
            raise self.fail_call.pop(number)
        if self.fail:
            raise self.fail.pop(0)
        works = super().fetch_many(conn, acks, count, ends, kinds)
        if self.reply_gate is not None:
            self.reply_gate.wait(5)
        return works

    def give_back(self, conn, raws):
        if self.fail_give_back:
            raise self.fail_give_back.pop(0)
        return super().give_back(conn, raws)


@pytest.fixture
def parts():
    strategy = Counting(IDENTITY, (QueueSpec("default", 1),))
    ledger, control = Ledger(), Control(conf.get().FETCH_IDLE_MAX_INTERVAL)
    # Two fetches out, as with SECOND_FETCH_FROM threads or more (four threads would get
    # one: test_one_fetch_out_below_second_fetch_from).
    d = Dispatcher(strategy, ledger, control, 4, fetches_out=2)
    yield strategy, ledger, control, d
    control.quiet.set()
    control.stopping.set()
    d.wake_waiting()
    if strategy.gate is not None:
        strategy.gate.set()
    # Every thread this test asked with leaves before the next test: a thread of an
    # earlier test's dispatcher, fetching late, would report its outages and recoveries
    # into the next one's log (the outage reporter is the process's).
    for t in threading.enumerate():
        if t.name.endswith("(ask)"):
            t.join(10)
    assert d.join(5) is False or not d._feeder.alive()  # noqa: SLF001 - it stopped


def push(*tokens: str) -> list[str]:
    jobs = [payload.build("testapp.jobs.record", [t], queue="default") for t in tokens]
    conn = connection.get_client()
    for job in jobs:
        conn.lpush(keys.queue("default"), payload.encode(job))
    return [j["jid"] for j in jobs]


def jid_of(work) -> str:
    return payload.decode(work.raw)["jid"]


def wait_for(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def ran(ledger: Ledger, work) -> None:
    """``work`` (started by its thread already) succeeded: its ack waits in the ledger
    for the next fetch."""
    assert ledger.performed(work)
    ledger.succeeded(work)
    assert work.state == ACK


def one_job_ran(d: Dispatcher, ledger: Ledger):
    """One job queued, the dispatcher started, a thread took it and it ran: its ack
    waits for the next fetch."""
    push("a")
    d.start()
    got: list = []
    take(d, got).join(5)
    ran(ledger, got[0])
    return got[0]


def take(d: Dispatcher, got: list) -> threading.Thread:
    """A processor thread's ask: wait for the next job and start it (as a processor
    does, in the ledger)."""

    def ask() -> None:
        work = d.next(None)
        if work is not None:
            d.ledger.start(work, threading.current_thread().name)
        got.append(work)

    t = threading.Thread(target=ask, daemon=True)
    t.start()
    return t


def fetched(d: Dispatcher) -> set[str]:
    """Jobs fetched and not started (FETCHED in the ledger)."""
    return {w.raw for w in d.ledger.works(FETCHED)}


def listed(r) -> list[str]:
    return sorted(
        payload.decode(x)["jid"]
        for x in r.lrange(keys.inprogress(IDENTITY, keys.home_of("default")), 0, -1)
    )


def test_threads_that_come_free_during_fetches_share_the_next_one(parts, r):
    strategy, _ledger, _control, d = parts
    assert FETCHES_OUT == 2
    push(*"abcdef")
    strategy.gate = threading.Event()
    d.start()
    got: list = []
    first = take(d, got)
    wait_for(lambda: len(strategy.calls) == 1)
    # A second thread comes free while the first one's fetch is out: it sends the
    # second fetch for itself. Two more come free while both are out: they wait.
    second = take(d, got)
    wait_for(lambda: len(strategy.calls) == 2)
    others = [take(d, got) for _ in range(2)]
    time.sleep(0.2)
    assert strategy.calls == [(0, 1), (0, 1)]  # two fetches out: nobody sends a third
    strategy.gate.set()
    for t in (first, second, *others):
        t.join(5)
    # The first two fetches (the threads' own) wanted one job each; the next, the
    # feeder's, sent as soon as one returned, one for each thread that came free while
    # both were out (never one for a thread another fetch out already asked for).
    assert strategy.calls == [(0, 1), (0, 1), (0, 2)]
    assert d.own_fetches == 2 and d.fetches == 3
    assert len(got) == 4 and all(w is not None for w in got)
    assert sorted(jid_of(w) for w in got) == listed(r)
    assert fetched(d) == set()  # every job fetched was taken


def test_one_fetch_out_below_second_fetch_from(r):
    """Fewer threads than SECOND_FETCH_FROM: one fetch out; a thread that comes free
    while it is out waits, and the feeder's next fetch serves it."""
    assert FETCHES_OUT == 2
    strategy = Counting(IDENTITY, (QueueSpec("default", 1),))
    ledger, control = Ledger(), Control(conf.get().FETCH_IDLE_MAX_INTERVAL)
    assert Dispatcher(strategy, ledger, control, SECOND_FETCH_FROM).fetches_out == 2
    d = Dispatcher(strategy, ledger, control, SECOND_FETCH_FROM - 1)
    assert d.fetches_out == 1
    push(*"abc")
    strategy.gate = threading.Event()
    d.start()
    try:
        got: list = []
        first = take(d, got)
        wait_for(lambda: len(strategy.calls) == 1)
        others = [take(d, got) for _ in range(2)]
        time.sleep(0.2)
        assert strategy.calls == [(0, 1)]  # one fetch out: nobody sends a second
        strategy.gate.set()
        for t in (first, *others):
            t.join(5)
        assert strategy.calls == [(0, 1), (0, 2)] and None not in got
    finally:
        control.quiet.set()
        control.stopping.set()
        d.join(5)


def test_a_thread_that_finds_the_fetch_role_free_fetches_for_itself(parts, r):
    strategy, ledger, _control, d = parts
    push(*"abc")
    d.start()
    mine = []
    for _ in range(3):  # one thread, job after job: no hand-off to the feeder
        work = d.next(None)
        assert work is not None
        mine.append(jid_of(work))
        ledger.start(work, "processor-0")
        ran(ledger, work)
    assert strategy.calls == [(0, 1), (1, 1), (1, 1)]
    assert d.own_fetches == 3 and d.fetches == 3
    assert listed(r) == [mine[-1]]  # the earlier two acked by the fetches after them
    assert work.state == ACK  # the last one's ack rides with the next


def test_an_own_fetch_that_raises_leaves_the_role_free(parts, r):
    """A BaseException (not an outage) out of a thread's own fetch leaves its thread;
    the role and the count of threads waiting are as if it had never asked."""
    strategy, _ledger, _control, d = parts
    push("a")
    d.start()
    strategy.fail = [KeyboardInterrupt()]
    with pytest.raises(KeyboardInterrupt):
        d.next(None)
    assert len(d._free_links) == 2 and d._coming_plain == d._coming_async == d._wanting == 0  # noqa: SLF001
    got: list = []
    take(d, got).join(5)
    assert got[0] is not None and strategy.calls == [(0, 1), (0, 1)]


def test_no_job_is_fetched_for_a_busy_thread(parts, r):
    strategy, ledger, control, d = parts
    push(*"abcdefgh")
    d.start()
    got: list = []
    take(d, got).join(5)
    take(d, got).join(5)
    time.sleep(0.3)  # the feeder would fetch ahead now, if it did
    # Two threads asked, each got one job; nothing else was taken from the queue.
    assert len(got) == 2 and len(listed(r)) == 2
    assert d.fetched_jobs == 2 and fetched(d) == set()
    assert r.llen(keys.queue("default")) == 6


def test_acks_ride_with_the_next_fetch_and_leave_the_ledger(parts, r):
    strategy, ledger, _control, d = parts
    push("a", "b")
    d.start()
    got: list = []
    take(d, got).join(5)
    first = got[0]
    ran(ledger, first)
    take(d, got).join(5)  # the same thread, free again: its fetch carries the ack
    assert strategy.calls == [(0, 1), (1, 1)]
    assert listed(r) == [jid_of(got[1])]
    assert first.state == "" and ledger.pending() == []  # acked: out of the ledger


def test_an_ack_goes_at_once_while_the_queues_are_empty(r):
    # The queues ran dry: the feeder waits on their doorbells (here up to a minute, and
    # no push rings them); a job that finishes meanwhile has its ack sent at once, by the
    # fetch of its thread coming free, not at the wait's end.
    strategy = Counting(IDENTITY, (QueueSpec("default", 1),))
    ledger, control = Ledger(), Control(60.0)
    d = Dispatcher(strategy, ledger, control, 4, fetches_out=2)
    try:
        push("a")
        d.start()
        got: list = []
        take(d, got).join(5)
        (work,) = got
        take(d, [])  # another thread waits: the feeder finds the queue empty
        wait_for(lambda: d._awaiting, 10)  # noqa: SLF001 - in its wait on the doorbells
        before = len(strategy.calls)
        ran(ledger, work)
        began = time.monotonic()
        take(d, [])  # its thread, free again: its own fetch carries the ack
        wait_for(lambda: work.state == "", 5)
        assert time.monotonic() - began < 0.5  # not at the wait's end
        assert r.llen(keys.inprogress(IDENTITY, keys.home_of("default"))) == 0
        assert strategy.calls[before][0] == 1  # its ack, on the next fetch
        assert d._awaiting  # noqa: SLF001 - the feeder still waits: the thread sent it
    finally:
        control.quiet.set()
        control.stopping.set()
        d.join(5)


def test_quiet_ends_the_wait_and_stop_keeps_fetched_jobs_listed(parts, r):
    strategy, _ledger, control, d = parts
    push("a", "b", "c")
    d.start()
    got: list = []
    take(d, got).join(5)
    # Three threads come free (the first two send a fetch each for themselves, the third
    # waits), and the process stops while those fetches are out.
    strategy.gate = threading.Event()
    fetching = []
    for n in (2, 3):
        fetching.append(take(d, got))
        wait_for(lambda n=n: len(strategy.calls) == n)
    waiting = take(d, got)
    control.stopping.set()
    control.quiet.set()
    d.wake_waiting()  # as the manager's quiet does
    waiting.join(2)
    assert got[1:] == [None]  # the waiting thread leaves with nothing
    assert d.join(0.1) is True  # fetches are out: a second pass is due
    strategy.gate.set()
    for t in fetching:
        t.join(2)
    assert got[1:] == [None, None, None]  # nor do the fetching threads take what came
    wait_for(lambda: not d._feeder.alive())  # noqa: SLF001
    # What those fetches took (one job per thread free when each went out) is listed
    # and known, never handed out: the hand-over's.
    held = sum(wanted for _acks, wanted in strategy.calls[1:])
    assert held == 2 and len(fetched(d)) == held
    assert r.llen(keys.inprogress(IDENTITY, keys.home_of("default"))) == 1 + held
    assert d.next(None) is None


def test_quiet_wakes_the_waiting_threads_at_once(parts, r, monkeypatch):
    # A thread waiting for a job looks at quiet every THREAD_WAIT; a quiet wakes it at
    # once (wake_waiting, called by the manager's quiet): here the wait is a minute, so
    # a thread that waited it out would not be back within the wait below.
    from cogworker_django.worker import dispatch

    monkeypatch.setattr(dispatch, "THREAD_WAIT", 60.0)
    strategy, ledger, control, d = parts
    one_job_ran(d, ledger)
    strategy.gate = threading.Event()  # the fetches out stay out: the others wait
    got: list = []
    threads = [take(d, got) for _ in range(3)]
    wait_for(lambda: len(strategy.calls) == 3)  # two fetches out, the third thread waits
    control.quiet.set()
    d.wake_waiting()
    wait_for(lambda: got == [None])  # the waiting one left, with nothing
    assert sum(t.is_alive() for t in threads) == 2  # the two inside their gated fetches
    strategy.gate.set()


def test_a_failed_fetch_leaves_its_acks_pending_and_the_feeder_goes_on(parts, r, caplog):
    strategy, ledger, _control, d = parts
    push("a", "b")
    d.start()
    got: list = []
    take(d, got).join(5)
    work = got[0]
    ran(ledger, work)
    import redis

    # (The fetch that fails may be the thread's own or the feeder's, sent with the ack
    # waiting: the log is read from before either.)
    with caplog.at_level(logging.INFO, logger="cogworker_django"):
        strategy.fail = [redis.ConnectionError("Connection refused")]
        take(d, got).join(5)
    assert work.state == PENDING and ledger.pending() == [work]  # the heartbeat acks it
    # The feeder backed off and fetched again: the thread got its job.
    assert got[1] is not None and jid_of(got[1]) != jid_of(work)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("Fetch: Redis unavailable" in m for m in lines) == 1, lines
    assert sum("Fetch: Redis recovered" in m for m in lines) == 1


def test_a_feeder_that_raises_is_restarted_with_its_state(parts, r, caplog):
    strategy, _ledger, _control, d = parts
    push("a", "b", "c")
    # Two threads' own fetches are held back; a third thread comes free meanwhile, so
    # the next fetch is the feeder's, and it raises (no Exception: escapes the fetch's
    # handling).
    strategy.gate = threading.Event()
    strategy.fail_call = {3: KeyboardInterrupt()}
    d.start()
    got: list = []
    threads = []
    for n in (1, 2):
        threads.append(take(d, got))
        wait_for(lambda n=n: len(strategy.calls) == n)
    threads.append(take(d, got))
    time.sleep(0.1)
    with caplog.at_level(logging.ERROR, logger="cogworker_django"):
        strategy.gate.set()
        for t in threads:
            t.join(5)
    assert len(got) == 3 and None not in got  # the thread that was waiting got its job
    assert any("the feeder failed" in r.getMessage() for r in caplog.records)


def test_the_event_loops_hand_in_never_waits_for_the_dispatchers_lock(parts, r):
    """The loop every async job shares hands in freed slots while a thread holds the
    dispatcher's lock: it returns at once, and the feeder's next fetch carries the ack."""
    from cogworker_django.worker.aio import Freed

    strategy, ledger, control, d = parts
    work = one_job_ran(d, ledger)
    with d._lock:  # noqa: SLF001 - a processor thread in the middle of its bookkeeping
        loop = threading.Thread(target=d.hand_in, args=(Freed(1),), daemon=True)
        loop.start()
        loop.join(5)
        assert not loop.is_alive()
    wait_for(lambda: work.state == "")
    assert (1, 0) in strategy.calls  # the ack, alone (no thread wants a job)
    assert r.llen(keys.inprogress(IDENTITY, keys.home_of("default"))) == 0


def test_give_back_and_flush(parts, r):
    strategy, ledger, control, d = parts
    push("a", "b")
    d.start()
    got: list = []
    asked = threading.Thread(target=lambda: got.append(d.next(None)), daemon=True)
    asked.start()
    asked.join(5)
    a = got[0]
    assert d.give_back(a) is True and fetched(d) == {a.raw}  # FETCHED: the hand-over's
    control.stopping.set()
    control.quiet.set()
    assert d.join(5) is False
    ledger.start(a, "processor-0")
    ran(ledger, a)
    assert d.next(None) is None  # the ack waits: the feeder made its last fetch
    d.flush(connection.get_client())
    assert strategy.calls[-1] == (1, 0)
    assert a.state == "" and r.llen(keys.inprogress(IDENTITY, keys.home_of("default"))) == 0


def test_a_stop_of_an_idle_worker_wakes_its_waiting_threads(inworker, monkeypatch):
    # The manager's quiet (every stop begins with it) wakes the threads waiting for a
    # job: with a minute's THREAD_WAIT, a stop that left them to it would not be done
    # within the join below.
    from cogworker_django.worker import dispatch

    monkeypatch.setattr(dispatch, "THREAD_WAIT", 60.0)
    w = inworker(concurrency=5)
    w.run_until(lambda: w.manager.source.fetches >= 1)  # the threads wait now
    stopper = threading.Thread(target=w.stop)
    stopper.start()
    stopper.join(10)
    assert not stopper.is_alive()


def test_a_second_quiet_adds_no_wake_ups(inworker):
    # Each quiet that wakes puts one wake-up per thread on the ready queue; only the
    # first can have threads to wake (they leave once quiet), so a TSTP, the admin's
    # Quiet and the stop's own quiet leave one set, not three, for the feeder to pass
    # over on every turn.
    w = inworker(concurrency=5)
    w.run_until(lambda: w.manager.source.fetches >= 1)
    for _ in range(3):
        w.manager.quiet()
    w.run_until(lambda: not any(p.alive() for p in w.manager.processors))
    assert w.manager.source._ready.qsize() == 0  # noqa: SLF001 - the wake-ups left


class RacingLedger(Ledger):
    """The real ledger; ``between`` runs once, right before the next snapshot is read
    (what another thread might do at that instant: after the reconcile read the list)."""

    between = None

    def snapshot(self):
        step, self.between = self.between, None
        if step is not None:
            step()
        return super().snapshot()


def test_the_reconcile_never_takes_a_job_on_its_way_to_a_thread(r, caplog):
    # The heartbeat's reconcile reads the process's list, then one snapshot of the
    # ledger (the jobs it knows, the fetches out); a job of the list unknown on two
    # looks, with every fetch out at the first look back, is one a lost reply took. Here
    # the job's fetch comes back between the list's read and the snapshot, and its
    # thread starts it: it must never be taken for a lost one.
    strategy = Counting(IDENTITY, (QueueSpec("default", 1),))
    ledger, control = RacingLedger(), Control(conf.get().FETCH_IDLE_MAX_INTERVAL)
    d = Dispatcher(strategy, ledger, control, 4, fetches_out=1)
    (jid,) = push("x")
    strategy.reply_gate = threading.Event()
    got: list = []
    asker = threading.Thread(target=lambda: got.append(d.next(None)), daemon=True)
    asker.start()  # its own fetch: ran in Redis, its reply held up
    wait_for(lambda: listed(r) == [jid])
    conn = connection.get_client()
    strategy.after_beat(conn, ledger)  # look 1: the job unknown, its fetch out

    def reply_arrives():  # after look 2 read the list, before its snapshot
        strategy.reply_gate.set()
        asker.join(5)

    ledger.between = reply_arrives
    strategy.after_beat(conn, ledger)  # look 2
    assert got and got[0] is not None and jid_of(got[0]) == jid
    (work,) = got
    ledger.between = lambda: ledger.start(work, "processor-0")  # started right then
    strategy.after_beat(conn, ledger)  # look 3: the fetch is back
    strategy.after_beat(conn, ledger)  # look 4
    assert "without knowing it" not in caplog.text
    assert listed(r) == [jid] and r.llen(keys.queue("default")) == 0
    assert [w.raw for w in ledger.running()] == [work.raw]


def test_a_fetch_back_after_quiet_gives_its_jobs_back_to_their_queue(r, caplog):
    # The threads leave their loop once the process is quiet (a TSTP or the admin's
    # Quiet, which can last hours before the TERM): a job a fetch out at that moment
    # brings back would wait on this process's list, run by nobody, until the stop.
    caplog.set_level(logging.INFO, logger="cogworker_django")
    strategy = Counting(IDENTITY, (QueueSpec("default", 1),))
    ledger, control = Ledger(), Control(conf.get().FETCH_IDLE_MAX_INTERVAL)
    d = Dispatcher(strategy, ledger, control, 4, fetches_out=1)
    (jid,) = push("x")
    strategy.reply_gate = threading.Event()
    strategy.fail_give_back = [redis.ConnectionError("Redis away for the first try")]
    d.start()
    try:
        got: list = []
        asker = take(d, got)
        wait_for(lambda: listed(r) == [jid])
        control.quiet.set()
        d.wake_waiting()  # as the manager's quiet does
        strategy.reply_gate.set()
        asker.join(5)
        assert got == [None]  # not run here
        # The first try fails (Redis away): kept listed and known, tried again.
        wait_for(lambda: r.llen(keys.queue("default")) == 1, 10)
        assert listed(r) == [] and fetched(d) == set()
        assert "Quiet give-back: Redis unavailable" in caplog.text
        assert "put 1 job(s) fetched but not started back on their queues" in caplog.text
        (back,) = r.lrange(keys.queue("default"), 0, -1)
        assert payload.decode(back)["jid"] == jid
    finally:
        control.stopping.set()
        d.join(5)


def test_no_thread_fetches_on_a_link_the_exiting_feeder_may_be_closing(r):
    # A stop sets stopping, then quiet: between the two the feeder can exit and close its
    # free links, while a thread coming free, not yet seeing quiet, would take one of them
    # for its own fetch (and have it closed under its read).
    strategy = Counting(IDENTITY, (QueueSpec("default", 1),))
    ledger, control = Ledger(), Control(conf.get().FETCH_IDLE_MAX_INTERVAL)
    d = Dispatcher(strategy, ledger, control, 4, fetches_out=1)
    push("x")
    d.start()
    control.stopping.set()
    d.join(5)
    assert not d._feeder.alive()  # noqa: SLF001 - the feeder is gone, its links closed
    got: list = []
    take(d, got).join(5)
    assert got == [None] and strategy.calls == []
