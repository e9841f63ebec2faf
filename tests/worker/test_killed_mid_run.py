"""Workers SIGKILLed mid-run, across the features that must lose nothing to it: the
in-progress list is the record, and orphan recovery (the next worker, after
ORPHAN_THRESHOLD) brings every job back under its jid. Real ``manage.py cogworker``
processes, real SIGKILL (and SIGSTOP where a process must come back).

- Recovery itself: a killed worker is logged missing once before its jobs are
  recovered, and again after each silence; the admin's "awaiting recovery" list shows
  its jobs until a worker recovers them.
- A thread's own fetch (worker/dispatch.py) whose reply is held back on the way (a real
  proxy, helpers.ReplyCutter) while the process is SIGKILLed, or while TERM arrives.
- Unique locks: a run killed mid-run is recovered under the same jid and releases its
  lock; a lock nobody recovers lapses at its TTL; a killed while_executing run takes
  its lock back.
- Retry control: on_dead is pushed exactly once through kills of the filing worker, and
  a job that keeps killing its worker gets its on_dead from recovery.
"""

from __future__ import annotations

import itertools
import json
import re
import signal
import time

import pytest
from testapp import jobs as tj
from testapp import result_jobs as rj

from cogworker_django.api import AwaitingRecovery, Workers
from cogworker_django.store import keys

from ..core.unique_helpers import lock_of
from ..helpers import ReplyCutter, wait_until

# A process seen missing (no presence, beats stopped) is logged once, with how many jobs
# it left and about when they will be recovered: until then they show nowhere else but
# the admin's "awaiting recovery" list.


def test_a_killed_worker_is_logged_missing_once_before_its_jobs_are_recovered(worker, r, prefix):
    settings = {"ORPHAN_THRESHOLD": 8, "CONCURRENCY": 3}
    tj.tracked.enqueue_many([(30, f"m{i}") for i in range(3)])
    a = worker(settings=settings)
    (ident,) = wait_until(lambda: r.smembers(f"{prefix}:processes"), 10, message="registered")
    wait_until(lambda: r.llen(f"{prefix}:inprogress:{ident}") == 3, 10)
    b = worker(settings=settings)
    a.kill()
    b.wait_for_log(
        rf"process {re.escape(ident)} is missing \(no beat for \d+s\): its 3 job\(s\)", 15
    )
    b.wait_for_log(rf"recovered 3 job\(s\) from dead process {re.escape(ident)}", 20)
    log = b.log()
    assert log.count(f"process {ident} is missing") == 1
    assert log.index("is missing") < log.index("recovered 3 job(s)")


def test_a_process_missing_again_after_it_came_back_is_logged_again(worker, r, prefix):
    """Once per silence, not once per process: a worker stopped (SIGSTOP), resumed and
    stopped again is logged missing twice, and, back each time before the threshold,
    keeps its jobs."""
    settings = {"ORPHAN_THRESHOLD": 20, "CONCURRENCY": 2}
    tj.tracked.enqueue_many([(60, f"m{i}") for i in range(2)])
    a = worker(settings=settings)
    (ident,) = wait_until(lambda: r.smembers(f"{prefix}:processes"), 10, message="registered")
    wait_until(lambda: r.llen(f"{prefix}:inprogress:{ident}") == 2, 10)
    b = worker(settings={**settings, "QUEUES": ["elsewhere"]})
    missing = rf"process {re.escape(ident)} is missing"
    for silence in (1, 2):
        a.signal(signal.SIGSTOP)
        try:
            b.wait_for_log(missing, 15, count=silence)
        finally:
            a.signal(signal.SIGCONT)
        wait_until(lambda: r.exists(f"{prefix}:process:{ident}"), 10, message="beating again")
    assert "from dead process" not in b.log()
    assert r.llen(f"{prefix}:inprogress:{ident}") == 2
    a.kill()
    b.kill()


# Also on a Redis Cluster, with one hash tag and with a home per queue, as every test of
# api.ProcessSet (tests/api/test_api_processes.py).
@pytest.mark.cluster
@pytest.mark.spread
def test_a_killed_workers_jobs_await_recovery_until_a_worker_recovers_them(configure, worker, r):
    configure(ORPHAN_THRESHOLD=60)
    jid = tj.slow.enqueue(60, "orphaned")
    first = worker(settings={"ORPHAN_THRESHOLD": 60})
    identity = wait_until(lambda: Workers().list(), 15, message="job running")[0].identity
    first.kill()  # SIGKILL: no clean-up, the job stays in its in-progress list
    (orphan,) = wait_until(
        lambda: AwaitingRecovery().list(), 15, message="listed as awaiting recovery"
    )
    assert orphan.identity == identity and orphan.size == 1
    assert orphan.jobs[0].jid == jid and orphan.jobs[0].func == "testapp.jobs.slow"
    assert 40 < orphan.recover_in <= 61
    # A worker with a short threshold recovers the job; the list empties.
    worker(settings={"ORPHAN_THRESHOLD": 2})
    wait_until(lambda: not AwaitingRecovery().list(), 20, message="recovered")


# A processor thread's own fetch (worker/dispatch.py) under real faults: the fetch ran in
# Redis but its reply is held back on the way (a real proxy, helpers.ReplyCutter) while
# the process is SIGKILLed, or while TERM arrives.
#
# One thread, two jobs queued before the worker starts: the thread's first fetch (the
# boot's) takes the first job; when that job is done the queues are not known to be
# empty and no fetch is out, so the next fetch, which acks the first job and takes the
# second, is the thread's own, not the feeder's. That reply is the one held back.


SECOND = "own-fetch-second"


def runs(client, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in client.hgetall(f"{prefix}:test:runs").items()}


def _held_at_the_second_fetch(worker, server, prefix, settings):
    client = server.client()
    tj.record.enqueue_many([("own-fetch-first",), (SECOND,)])
    proxy = ReplyCutter(server)
    proxy.hold(SECOND.encode())
    w = worker(redis_url=proxy.url, settings={"CONCURRENCY": 1, **settings})
    assert proxy.held.wait(10), "no fetch took the second job"
    (ident,) = client.smembers(f"{prefix}:processes")
    # The first job ran; the fetch that acked it and took the second ran in Redis.
    assert runs(client, prefix) == {"own-fetch-first": 1}
    listed = client.lrange(f"{prefix}:inprogress:{ident}", 0, -1)
    assert len(listed) == 1 and SECOND in listed[0]
    assert client.llen(f"{prefix}:queue:default") == 0
    # The held fetch is the thread's own: TTIN's dump of the stacks shows processor-0
    # inside its own fetch, waiting for that reply (not waiting for the feeder's).
    w.signal(signal.SIGTTIN)
    stack = wait_until(lambda: _stack_of(w.log(), "processor-0"), 10, message="the dump")
    assert "in _own_fetch" in stack, stack
    return w, proxy, ident, client


def _stack_of(log: str, thread: str) -> str | None:
    """The stack TTIN logged for ``thread`` (its lines up to the next log record)."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if re.search(rf"\bthread {re.escape(thread)} \(\d+\):$", line):
            rest = itertools.takewhile(
                lambda x: not re.match(r"\d{4}-\d\d-\d\d ", x), lines[i + 1 :]
            )
            return "\n".join(rest)
    return None


def test_a_sigkill_while_a_threads_own_fetch_is_out_loses_nothing(
    worker, redis_server, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    settings = {"ORPHAN_THRESHOLD": 3}
    w, proxy, ident, client = _held_at_the_second_fetch(worker, server, prefix, settings)
    try:
        w.kill()  # SIGKILL with the reply on its way: nothing cleaned up
    finally:
        proxy.release()
        proxy.close()
    # The job it took is on the dead process's list: another worker recovers and runs it,
    # once.
    survivor = worker(redis_url=server.url, settings=settings)
    wait_until(lambda: runs(client, prefix).get(SECOND) == 1, 30, message="recovered")
    survivor.wait_for_log(r"recovered 1 job\(s\) from dead process", timeout=10)
    assert runs(client, prefix) == {"own-fetch-first": 1, SECOND: 1}
    wait_until(lambda: not client.exists(f"{prefix}:inprogress:{ident}"), 10, message="list gone")
    assert survivor.stop() == 0
    assert runs(client, prefix) == {"own-fetch-first": 1, SECOND: 1}


def test_term_while_a_threads_own_fetch_is_out_requeues_what_it_took(
    worker, redis_server, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    w, proxy, ident, client = _held_at_the_second_fetch(worker, server, prefix, {})
    try:
        w.signal(signal.SIGTERM)
        w.wait_for_log("SIGTERM received: stopping")
        proxy.release()
        assert w.wait(20) == 0
    finally:
        proxy.close()
    # The fetch came back whole: the stop waited for it instead of closing its connection
    # under the thread (which failed it at once, or left it reading a reused descriptor
    # until its timeout while the heartbeat took the job for a lost reply).
    assert "Fetch: Redis unavailable" not in w.log(), w.log()
    # Fetched after the stop began: not run, back on its queue; the first job's ack went
    # with that fetch.
    assert "requeued 1 job(s) unfinished at shutdown" in w.log(), w.log()
    assert runs(client, prefix) == {"own-fetch-first": 1}
    queued = client.lrange(f"{prefix}:queue:default", 0, -1)
    assert len(queued) == 1 and SECOND in queued[0]
    assert not client.exists(f"{prefix}:inprogress:{ident}")


def test_a_reply_held_past_two_beats_brings_its_job_to_run_once(
    worker, redis_server, configure, prefix
):
    # The heartbeat's reconcile takes a listed job this process doesn't know for one a
    # lost reply took, after two looks; a reply only held up (a stalled proxy, a thread
    # starved of the interpreter lock) is not lost: its fetch is still out, so the job is
    # not requeued under it, and it runs once, here.
    server = redis_server()
    configure(REDIS_URL=server.url)
    w, proxy, ident, client = _held_at_the_second_fetch(
        worker, server, prefix, {"HEARTBEAT_INTERVAL": 1}
    )
    beats: set[bytes] = set()

    def three_beats() -> bool:
        beats.add(client.hget(f"{prefix}:process:{ident}", "beat") or b"")
        return len(beats - {b""}) >= 3

    try:
        wait_until(three_beats, 15, message="three beats with the reply held")
        assert "without knowing it" not in w.log(), w.log()
        proxy.release()
        wait_until(lambda: runs(client, prefix).get(SECOND) == 1, 10, message="ran")
        wait_until(
            lambda: (
                not client.llen(f"{prefix}:queue:default")
                and not client.llen(f"{prefix}:inprogress:{ident}")
            ),
            10,
            message="nothing left to run",
        )
        assert w.stop() == 0
    finally:
        proxy.close()
    assert runs(client, prefix) == {"own-fetch-first": 1, SECOND: 1}
    assert "without knowing it" not in w.log(), w.log()
    assert "Fetch: Redis unavailable" not in w.log(), w.log()


# Unique locks of runs killed with their worker (the lock waits for orphan recovery, or
# lapses at its TTL: never wedged).


def test_sigkill_mid_run_is_recovered_under_the_same_jid_and_releases(worker, r, prefix):
    job = tj.kill_first_run.using(unique="until_executed", unique_for=60)
    key = lock_of("k", func=tj.kill_first_run.path)
    workers = [worker(), worker()]
    jid = job.enqueue("k")
    wait_until(lambda: any(w.proc.poll() is not None for w in workers), message="a worker to die")
    # The run died with its worker: the job waits on the dead process's list, its lock
    # held for it, bounded by unique_for (never wedged past the TTL).
    assert r.get(key) == jid and 0 < r.ttl(key) <= 60
    assert job.enqueue("k") is None
    wait_until(lambda: r.hget(f"{prefix}:test:runs", "k") == "2", 15, message="the rerun")
    assert r.lrange(f"{prefix}:test:runs:k:jids", 0, -1) == [jid, jid]
    wait_until(lambda: not r.exists(key), message="the lock to be released")
    assert job.enqueue("k") is not None


def test_lock_of_a_run_nobody_recovers_still_lapses_at_its_ttl(worker, r, prefix):
    """No live process to recover the job: the lock is gone after unique_for anyway."""
    job = tj.kill_first_run.using(unique="until_executed", unique_for=1)
    key = lock_of("t", func=tj.kill_first_run.path)
    w = worker()
    jid = job.enqueue("t")
    w.wait(10)
    assert r.hget(f"{prefix}:test:runs", "t") == "1"
    wait_until(lambda: not r.exists(key), 3, message="the lock's TTL to lapse")
    # The orphan is still on the dead process's list: when recovered it runs, and its
    # release (owner-checked) leaves the newer job's lock alone.
    assert any(
        json.loads(raw)["jid"] == jid
        for ident in r.smembers(keys.inprogress_ids())
        for raw in r.lrange(keys.inprogress(ident, keys.home_of("default")), 0, -1)
    )
    assert job.enqueue("t") not in (None, jid)


def test_a_killed_while_executing_run_takes_its_lock_back_and_releases_it(worker, r, prefix):
    """A while_executing run whose worker is SIGKILLed mid-run (kill_first_run): its
    lock stays held for it, a duplicate that comes to run meanwhile is rescheduled, the
    run recovered under the same jid takes its own lock back, and the lock is gone once
    both have run, never together."""
    job = tj.kill_first_run.using(unique="while_executing", unique_for=60)
    key = lock_of("we", func=tj.kill_first_run.path)
    settings = {"UNIQUE_RESCHEDULE_DELAY": 0.3}
    workers = [worker(settings=settings), worker(settings=settings)]
    jid = job.enqueue("we")
    wait_until(lambda: any(w.proc.poll() is not None for w in workers), message="a worker to die")
    assert r.get(key) == jid  # the killed run's lock stays
    dup = job.enqueue("we")
    assert dup not in (None, jid)  # while_executing: no lock at push
    wait_until(lambda: r.hget(f"{prefix}:test:runs", "we") == "3", 20, message="all runs")
    jids = r.lrange(f"{prefix}:test:runs:we:jids", 0, -1)
    # The recovered run took its lock back before the duplicate could run.
    assert jids == [jid, jid, dup], jids
    wait_until(lambda: not r.exists(key), message="the lock to be released")
    assert (
        r.zcard(keys.dead(keys.home_of("default"))) == 0
        and r.zcard(keys.retry(keys.home_of("default"))) == 0
    )


# Retry control's on_dead through kills of the filing worker.


def test_on_dead_is_pushed_exactly_once_through_sigkills_of_the_filing_worker(worker, r, prefix):
    """Workers SIGKILLed at random moments while jobs die (some mid-run, some around the
    filing): every job ends in dead once and its on_dead job is pushed exactly once (the
    filing and the push are one script)."""
    import random

    n = 10
    jids = {str(rj.dies_slowly.enqueue(0.3)) for _ in range(n)}
    settings = {"MAX_ORPHANINGS": 1000, "CONCURRENCY": 3}
    rng = random.Random(46)
    kills = 0
    while r.zcard(f"{prefix}:dead") < n and kills < 10:
        w = worker(settings=settings)
        time.sleep(rng.uniform(0.1, 1.2))
        w.signal(signal.SIGKILL)
        w.wait(10)
        kills += 1
    w = worker(settings=settings)
    wait_until(lambda: r.zcard(f"{prefix}:dead") == n, 60, message="every job dead")
    wait_until(lambda: r.llen(f"{prefix}:test:alerts") >= n, 30, message="alerts")
    w.stop()
    alerts = r.lrange(f"{prefix}:test:alerts", 0, -1)
    # Each dead job pushed one on_dead job (one jid), no more; a run of it interrupted by
    # a kill may run again (at least once, as any job), with the same jid.
    pushed = {tuple(a.split("|")[1:]) for a in alerts}
    assert sorted(dead for dead, _own in pushed) == sorted(jids), (kills, alerts)
    assert kills >= 2  # the kills came while jobs ran


def test_a_job_that_keeps_killing_its_worker_gets_its_on_dead_from_recovery(worker, r, prefix):
    ref = rj.kills_its_worker.enqueue()
    settings = {"MAX_ORPHANINGS": 1}
    for _ in range(2):  # two runs kill their workers; the third start recovers it to dead
        w = worker(settings=settings)
        w.wait(30)
    w = worker(settings=settings)
    wait_until(lambda: r.lrange(f"{prefix}:test:alerts", 0, -1), 30, message="on_dead")
    w.stop()
    ((message, dead, _own),) = [a.split("|") for a in r.lrange(f"{prefix}:test:alerts", 0, -1)]
    assert (message, dead) == ("killer", str(ref))
    (raw,) = r.zrange(f"{prefix}:dead", 0, -1)
    assert '"error_class":"OrphanedTooOften"' in raw
