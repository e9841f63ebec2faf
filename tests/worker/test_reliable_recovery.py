"""Orphan recovery: the jobs of a process that died are run by the living; a job that
keeps killing its workers ends in dead; two recoverers never requeue a job twice."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from testapp import jobs as tj

from cogworker_django.conf import QueueSpec
from cogworker_django.core import payload
from cogworker_django.store import connection, keys
from cogworker_django.worker.fetch import ReliableFetch
from cogworker_django.worker.heartbeat import Heartbeat
from cogworker_django.worker.manager import Manager
from cogworker_django.worker.recovery import (
    OrphanRecovery,
    redis_now,
    requeue_from_list,
    stamp_of,
)

from ..helpers import wait_until

# Reliable fetch and orphan recovery behave the same on a Redis Cluster: every test runs on both
# (tests/cluster_support.py).
pytestmark = pytest.mark.cluster


def counts(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def logged_at(log: str, pattern: str) -> float:
    """When the first line matching ``pattern`` was logged (its asctime, this machine's
    clock, as Redis's here)."""
    m = re.search(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*" + pattern, log, re.M)
    assert m, pattern
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000


def test_sigkilled_workers_jobs_are_run_by_another_after_the_threshold(worker, r, prefix):
    # Longer than the presence key's TTL (2 s at these beats): a recovery that waited
    # only for that would come too soon.
    threshold = 5
    settings = {"ORPHAN_THRESHOLD": threshold, "CONCURRENCY": 5}
    tokens = [f"k{i}" for i in range(5)]
    tj.tracked.enqueue_many([(4, t) for t in tokens])
    a = worker(settings=settings)
    wait_until(
        lambda: all(counts(r, prefix).get(f"{t}:start") == 1 for t in tokens),
        10,
        message="all 5 started in the first worker",
    )
    (ident_a,) = r.smembers(f"{prefix}:processes")
    assert r.llen(f"{prefix}:inprogress:{ident_a}") == 5
    # The recoverer is running before the kill: what it does after is timed from the kill,
    # not from its own boot.
    b = worker(settings=settings)
    a.kill()  # SIGKILL: no hand-over, nothing cleaned up
    last_beat = stamp_of(r.hget(f"{prefix}:last_beat", ident_a))
    assert last_beat is not None
    assert r.llen(f"{prefix}:inprogress:{ident_a}") == 5
    b.wait_for_log(r"recovered 5 job\(s\) from dead process", timeout=threshold + 10)
    # Not before the dead process's last beat was `threshold` seconds old (the line is
    # logged after the move: its time is no earlier than the recovery's).
    recovered_at = logged_at(b.log(), r"recovered 5 job\(s\) from dead process")
    assert recovered_at - last_beat >= threshold, (recovered_at - last_beat, threshold)
    # Forgotten once its list was empty: that step comes just after the "recovered" line.
    wait_until(
        lambda: r.hget(f"{prefix}:last_beat", ident_a) is None, 5, message="its stamp forgotten"
    )
    wait_until(
        lambda: all(counts(r, prefix).get(f"{t}:end") == 1 for t in tokens),
        10,
        message="all 5 finished in the second worker",
    )
    c = counts(r, prefix)
    for t in tokens:
        assert c[f"{t}:start"] == 2, c  # once in each worker: never more than twice
        assert c[f"{t}:end"] == 1, c
    assert not r.exists(f"{prefix}:inprogress:{ident_a}")
    assert ident_a not in r.smembers(f"{prefix}:inprogress_ids")
    assert ident_a not in r.smembers(f"{prefix}:processes")
    assert b.stop() == 0
    assert r.scard(f"{prefix}:inprogress_ids") == 0


def test_recovered_job_carries_its_orphan_count(worker, r, prefix):
    settings = {"ORPHAN_THRESHOLD": 1.5}
    tj.count_then_sleep.enqueue(30, "stuck")
    a = worker(settings=settings)
    wait_until(lambda: counts(r, prefix).get("stuck") == 1, 10, message="started")
    a.kill()
    b = worker(settings=settings)
    wait_until(lambda: counts(r, prefix).get("stuck") == 2, 10, message="recovered and started")
    (ident_b,) = [i for i in r.smembers(f"{prefix}:processes") if r.exists(f"{prefix}:process:{i}")]
    (raw,) = r.lrange(f"{prefix}:inprogress:{ident_b}", 0, -1)
    assert json.loads(raw)["orphan_count"] == 1
    b.kill()


def test_a_job_that_kills_its_worker_ends_in_dead_while_others_flow(worker, r, prefix):
    """kill_own_process SIGKILLs the process running it. With --processes 2 the
    supervisor replaces each dead child; after MAX_ORPHANINGS recoveries the job goes to
    dead instead of killing workers forever, and other jobs keep running meanwhile.

    One thread per child: a job running beside the poison job in the same process dies
    with it and counts the orphaning too (docs/reliability.md), and one fetched with it
    every time (the next in the queue, at each child's start) would reach dead with it;
    this test is about the poison job alone and the flow around it."""
    max_orphanings = 2
    settings = {"ORPHAN_THRESHOLD": 1.5, "MAX_ORPHANINGS": max_orphanings, "CONCURRENCY": 1}
    w = worker(args=["--processes", "2"], settings=settings, wait=False)
    w.wait_for_log(r"cogworker \S+ started", count=2, timeout=30)
    jid = tj.kill_own_process.enqueue()
    stop = threading.Event()
    pushed: list[str] = []

    def keep_pushing() -> None:
        i = 0
        while not stop.is_set():
            tj.record.enqueue(f"flow{i}")
            pushed.append(f"flow{i}")
            i += 1
            stop.wait(0.1)

    pusher = threading.Thread(target=keep_pushing)
    pusher.start()
    try:
        deads = wait_until(
            lambda: [json.loads(m) for m in r.zrange(f"{prefix}:dead", 0, -1)],
            40,
            message="the poison job in dead",
        )
        assert len(deads) == 1, deads
        (dead,) = deads
        # Flowing: jobs pushed in the last moments still run.
        mark = len(pushed)
        wait_until(
            lambda: all(r.hexists(f"{prefix}:test:runs", t) for t in pushed[:mark]),
            10,
            message="the other jobs ran",
        )
    finally:
        stop.set()
        pusher.join()
    assert dead["jid"] == jid
    assert dead["error_class"] == "OrphanedTooOften"
    assert f"recovered from dead workers {max_orphanings} times" in dead["error_message"]
    assert dead["orphan_count"] == max_orphanings + 1
    # The first run plus one per recovery.
    assert int(r.hget(f"{prefix}:test:runs", jid)) == max_orphanings + 1
    log = w.log()
    assert len(re.findall(r"exited with -9; starting a replacement", log)) == max_orphanings + 1
    assert "filed in dead: recovered from dead workers" in log
    # Nothing else was lost: every job pushed meanwhile runs.
    wait_until(
        lambda: all(r.hexists(f"{prefix}:test:runs", t) for t in pushed),
        10,
        message="every pushed job ran",
    )
    w.signal(15)
    assert w.wait(20) == 0
    assert r.llen(f"{prefix}:queue:default") == 0


def _fabricate_dead_process(r, prefix, ident: str, n: int) -> list[str]:
    raws = [
        payload.encode(payload.build("testapp.jobs.record", [f"g{i}"], jid=f"ghost{i}"))
        for i in range(n)
    ]
    r.rpush(f"{prefix}:inprogress:{ident}", *raws)
    r.sadd(f"{prefix}:inprogress_ids", ident)
    r.hset(f"{prefix}:last_beat", ident, int(time.time()) - 3600)
    return raws


CHECK_THRESHOLD = 1.0  # ORPHAN_THRESHOLD of the in-process checkers below


def _heartbeat(identity: str) -> Heartbeat:
    """A real heartbeat of an in-process checker (its pool built, no thread started)."""
    fetcher = ReliableFetch(identity, (QueueSpec("default", 1),))
    return Heartbeat(Manager(identity, fetcher, 1), on_stop_signal=lambda: None)


def _healthy(*identities: str) -> list[Heartbeat]:
    """Heartbeats that beat against Redis for a whole ORPHAN_THRESHOLD (Redis's clock):
    checkers that may judge others dead."""
    beats = [_heartbeat(i) for i in identities]
    for hb in beats:
        hb.beat()
    since = min(hb.clearance.since for hb in beats)
    conn = connection.get_client()
    wait_until(
        lambda: redis_now(conn) - since >= CHECK_THRESHOLD + 0.05, 10, message="a clear stretch"
    )
    for hb in beats:
        hb.beat()
    return beats


@pytest.fixture
def checkers(configure):
    configure(ORPHAN_THRESHOLD=CHECK_THRESHOLD)
    return _healthy


def test_two_recoverers_at_once_requeue_each_job_exactly_once(r, prefix, checkers):
    """Four checkers recover one dead process's 300 jobs at the same moment: each job is
    requeued once. Every round checks that in full; rounds (each with its own dead
    process) repeat, up to five, until one shows a real race, more than one checker
    moving jobs: the first to start can finish before the others begin, and a round
    without a race proves nothing about one."""
    n = 300
    names = [f"living{i}" for i in range(4)]
    beats = dict(zip(names, checkers(*names), strict=True))
    rounds: list[list[int]] = []
    for round_ in range(5):
        ident = f"ghost:1:dead{round_}"
        raws = _fabricate_dead_process(r, prefix, ident, n)
        for hb in beats.values():
            hb.beat()
        moved = _at_once(*(_recovery(name, hb) for name, hb in beats.items()))
        assert sum(moved) == n, moved
        queued = [json.loads(x) for x in r.lrange(f"{prefix}:queue:default", 0, -1)]
        assert len(queued) == n
        assert sorted(j["jid"] for j in queued) == sorted(json.loads(x)["jid"] for x in raws)
        assert {j["orphan_count"] for j in queued} == {1}
        assert not r.exists(f"{prefix}:inprogress:{ident}")
        assert ident not in r.smembers(f"{prefix}:inprogress_ids")
        assert r.hget(f"{prefix}:last_beat", ident) is None
        r.delete(f"{prefix}:queue:default")
        rounds.append(moved)
        if len([m for m in moved if m]) >= 2:
            break
    else:
        pytest.fail(f"no real race happened in {len(rounds)} rounds: {rounds}")


def _at_once(*calls: Callable[[Any], int]) -> list[int]:
    """Run each ``call(conn)`` on its own thread and client, started together (a barrier);
    what each returned, after every racer's exception is raised here."""
    barrier = threading.Barrier(len(calls))
    results: list[int] = []
    errors: list[BaseException] = []

    def race(call: Callable[[Any], int]) -> None:
        conn = connection.new_client()
        try:
            barrier.wait()
            results.append(call(conn))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=race, args=(call,)) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert len(results) == len(calls), results
    return results


def _recovery(name: str, beat: Heartbeat) -> Callable[[Any], int]:
    return lambda conn: OrphanRecovery(name, beat, "default").run(conn)


def test_two_processes_requeue_the_same_list_exactly_once(r, prefix):
    """The per-job script is owner-checked: the same raws requeued from two clients, in
    two orders, still land once each. Each racer tries every job; both moving some
    shows they ran at once (one finishing before the other began would move all), so
    rounds (each with its own dead process, every one checked in full) repeat, up to
    five, until one shows that."""
    n = 200
    rounds: list[list[int]] = []
    for round_ in range(5):
        ident = f"ghost:2:dead{round_}"
        raws = _fabricate_dead_process(r, prefix, ident, n)

        def requeue(order: list[str], ident: str = ident) -> Callable[[Any], int]:
            return lambda conn: requeue_from_list(
                conn,
                ident,
                order,
                home=keys.root(),
                count_orphaning=True,
                fallback_queue="default",
            )

        moved = _at_once(requeue(raws), requeue(list(reversed(raws))))
        assert sum(moved) == n, moved
        assert r.llen(f"{prefix}:queue:default") == n
        assert len(set(r.lrange(f"{prefix}:queue:default", 0, -1))) == n
        assert r.llen(f"{prefix}:inprogress:{ident}") == 0
        r.delete(f"{prefix}:queue:default")
        rounds.append(moved)
        if min(moved) > 0:
            break
    else:
        pytest.fail(f"no race happened in {len(rounds)} rounds: {rounds}")


def test_a_live_process_is_never_recovered(r, prefix, checkers):
    """A process whose presence key exists is alive, even with an old last-beat stamp
    (its stamp may be failing while its presence works)."""
    ident = "alive:1:x"
    _fabricate_dead_process(r, prefix, ident, 3)
    r.hset(f"{prefix}:process:{ident}", "busy", 0)
    (me,) = checkers("me")
    conn = connection.get_client()
    assert OrphanRecovery("me", me, "default").run(conn) == 0
    assert r.llen(f"{prefix}:inprogress:{ident}") == 3
    # A recent beat without presence: not yet dead either.
    ident2 = "recent:1:x"
    _fabricate_dead_process(r, prefix, ident2, 2)
    r.hset(f"{prefix}:last_beat", ident2, int(redis_now(conn)))
    assert OrphanRecovery("me", me, "default").run(conn) == 0
    assert r.llen(f"{prefix}:inprogress:{ident2}") == 2


def test_recovery_waits_for_healthy_beats_after_an_outage(r, prefix, checkers):
    """Rule 13: a process whose own beats only just recovered does not declare others
    dead (they have not had their chance to beat yet)."""
    _fabricate_dead_process(r, prefix, "ghost:3:dead", 2)
    conn = connection.get_client()
    never_beat = _heartbeat("me")  # no beat has gone through: judges nobody
    assert OrphanRecovery("me", never_beat, "default").run(conn) is None
    just_beat = _heartbeat("me")
    just_beat.beat()  # its first beat: a stretch shorter than the threshold
    assert OrphanRecovery("me", just_beat, "default").run(conn) == 0
    assert r.llen(f"{prefix}:inprogress:ghost:3:dead") == 2
    # Once Redis has answered it for a whole threshold, it recovers.
    (healthy,) = checkers("me")
    assert OrphanRecovery("me", healthy, "default").run(conn) == 2


def test_unparseable_orphan_goes_to_dead_and_past_max_orphanings_too(
    r, prefix, configure, checkers
):
    configure(MAX_ORPHANINGS=2)
    (me,) = checkers("me")
    ident = "ghost:4:dead"
    worn = payload.build("testapp.jobs.record", ["w"], jid="worn")
    worn["orphan_count"] = 2
    r.rpush(f"{prefix}:inprogress:{ident}", b"\xff garbage", payload.encode(worn))
    r.sadd(f"{prefix}:inprogress_ids", ident)
    r.hset(f"{prefix}:last_beat", ident, int(time.time()) - 3600)
    conn = connection.get_client()
    assert OrphanRecovery("me", me, "default").run(conn) == 2
    dead = {json.loads(m)["func"]: json.loads(m) for m in r.zrange(f"{prefix}:dead", 0, -1)}
    assert dead["(unparseable)"]["raw_payload"] == "\\xff garbage"
    assert dead["testapp.jobs.record"]["error_class"] == "OrphanedTooOften"
    assert dead["testapp.jobs.record"]["orphan_count"] == 3
    assert r.llen(f"{prefix}:queue:default") == 0
    assert keys.inprogress(ident, keys.home_of("default")) not in {k for k in r.keys(f"{prefix}:*")}


def test_recovery_works_where_time_is_refused(worker, redis_server, configure, prefix):
    """Some proxies and managed services refuse TIME: beats are stamped with the host's
    clock instead, and recovery compares against it."""
    server = redis_server(extra=["--rename-command", "TIME", ""])
    configure(REDIS_URL=server.url)
    client = server.client()
    settings = {"ORPHAN_THRESHOLD": 1.5}
    tj.count_then_sleep.enqueue_many([(30, "t0"), (30, "t1")])
    a = worker(redis_url=server.url, settings=settings)
    wait_until(
        lambda: counts(client, prefix).get("t0") == 1 and counts(client, prefix).get("t1") == 1,
        10,
        message="both started",
    )
    (ident_a,) = client.smembers(f"{prefix}:processes")
    stamp = float(client.hget(f"{prefix}:last_beat", ident_a))
    assert abs(stamp - time.time()) < 5  # the host's clock
    a.kill()
    b = worker(redis_url=server.url, settings=settings)
    b.wait_for_log(r"recovered 2 job\(s\) from dead process", timeout=15)
    wait_until(
        lambda: counts(client, prefix).get("t0") == 2 and counts(client, prefix).get("t1") == 2,
        10,
        message="both run again",
    )
    b.kill()


def test_a_worker_booting_beside_a_stalled_one_lets_it_beat_first(
    worker, redis_server, configure, prefix
):
    """Rule 13 at boot: a worker stalled longer than ORPHAN_THRESHOLD (SIGSTOP here; a
    Redis outage or pause looks the same: its beat is stale, its presence expired) is
    still alive. A worker booting meanwhile must give it a few beats before declaring it
    dead: the stalled worker resumes, beats, and finishes its own jobs; none runs twice.
    The booted worker's "is missing" line shows it judged the stalled one in that state."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    client = server.client()
    threshold = 5
    fast = {"ORPHAN_THRESHOLD": threshold}
    first = worker(redis_url=server.url, settings=fast)
    ident = first.log().split("identity=")[1].split()[0]
    tokens = [f"long{i}" for i in range(3)]
    tj.slow.enqueue_many([(8, t) for t in tokens])
    wait_until(lambda: client.llen(f"{prefix}:inprogress:{ident}") == 3, 10,
               message="the first worker holds the 3 jobs")  # fmt: skip
    first.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: not client.exists(f"{prefix}:process:{ident}"), 10,
                   message="the stalled worker's presence to expire")  # fmt: skip
        last = float(client.hget(f"{prefix}:last_beat", ident))
        # and its last beat older than ORPHAN_THRESHOLD, on Redis's clock
        wait_until(
            lambda: float(client.time()[0]) - last > threshold + 0.2, 10, message="a stale beat"
        )
        booted = worker(redis_url=server.url, settings=fast)  # booted: its poller runs
        booted_at = time.monotonic()
        # The booted worker's orphan passes (every 0.5 s) find the stopped one stale and
        # without presence, and log it as missing rather than dead.
        booted.wait_for_log(
            rf"process {re.escape(ident)} is missing|from dead process", threshold - 1
        )
        assert time.monotonic() - booted_at < threshold
    finally:
        first.signal(signal.SIGCONT)
    wait_until(lambda: len(client.hgetall(f"{prefix}:test:runs")) == 3, 20, message="3 runs")

    def settled() -> bool:
        lists = [f"{prefix}:queue:default", *client.keys(f"{prefix}:inprogress:*")]
        return all(client.llen(k) == 0 for k in lists)

    wait_until(settled, 20, message="no job queued or in progress (a wrongly recovered copy ran)")
    assert client.hgetall(f"{prefix}:test:runs") == {t: "1" for t in tokens}
    # The booted worker is the one that would have recovered the stalled one's jobs.
    for w in (booted, first):
        assert not re.search(r"recovered \d+ job\(s\) from dead process", w.log()), w.log()
