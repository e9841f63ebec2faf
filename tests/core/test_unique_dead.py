"""Unique locks are never wedged: a job that leaves by any path releases its lock, a
worker killed mid-run leaves the lock to orphan recovery (or to its TTL), and a release
that fails while Redis is away goes through on the first heartbeat after it returns."""

import json
import re
import signal
import time

from testapp import jobs as tj

from cogworker_django.core import payload, unique
from cogworker_django.store import keys

from ..helpers import wait_until
from .unique_helpers import lock_of, stop_keeping_data

# How long the sleeper runs in the tests that stop Redis once it has started: long
# enough for a loaded machine to stop Redis before it returns (its release must meet
# the outage), short enough to keep the tests quick.
RUN_SECONDS = 3.0


def dead_jobs(r):
    return [json.loads(x) for x in r.zrange(keys.dead(keys.home_of("default")), 0, -1)]


def crafted(func, mode, *, jid=None, **extra):
    """A payload as a client would push it, for a callable of our choosing."""
    job = payload.build(
        func,
        ["x"],
        {},
        queue="default",
        jid=jid,
        unique=mode,
        unique_for=600,
        unique_digest=unique.digest(func, ["x"], {}, "default"),
        **extra,
    )
    return job, keys.unique(job["unique_digest"], keys.home_of("default"))


def test_terminal_failure_releases_the_lock_and_a_retried_one_extends_it(worker, r):
    # unique_for is long enough to outlast the first run on a loaded machine (the lock
    # must still be there when it fails), and shorter than the extension that follows.
    job = tj.always_fails.using(unique="until_executed", retry=1, unique_for=30)
    key = lock_of("x", func=tj.always_fails.path)
    worker(settings={"RETRY_BACKOFF": "testapp.jobs.backoff_2s"})
    jid = job.enqueue("x")
    wait_until(
        lambda: r.zcard(keys.retry(keys.home_of("default"))) == 1, message="the first failure"
    )
    # Waiting for its retry, the job keeps its lock, extended past unique_for (30 s) to
    # cover the backoff and the poller's minute: a duplicate is still refused.
    assert r.get(key) == jid and r.ttl(key) > 30
    assert job.enqueue("x") is None
    wait_until(
        lambda: r.zcard(keys.dead(keys.home_of("default"))) == 1, message="the terminal failure"
    )
    assert dead_jobs(r)[0]["jid"] == jid
    assert not r.exists(key)
    assert job.enqueue("x") is not None


def test_unregistered_and_queueless_jobs_sent_to_dead_release_their_locks(worker, r):
    """Payloads naming no registered job (never imported or run), or due with no queue,
    go to dead; their locks go with them. An unparseable payload has no digest to read:
    its lock (if the bytes ever had one) is left to its TTL."""
    held = {}
    for mode in ("until_executed", "until_started"):
        job, key = crafted(f"nowhere.{mode}", mode)
        r.set(key, job["jid"], ex=600)
        r.lpush(keys.queue("default"), payload.encode(job))
        held[key] = job["jid"]
    # A due job without a queue can't be requeued: the poller buries it in dead.
    job, key = crafted(tj.record.path, "until_executed", at=time.time())
    job["queue"] = None
    r.zadd(keys.schedule(keys.home_of("default")), {payload.encode(job): time.time() - 1})
    r.set(key, job["jid"], ex=600)
    held[key] = job["jid"]
    orphan_lock = keys.unique("digest-of-a-payload-that-got-mangled", keys.home_of("default"))
    r.set(orphan_lock, "jid-lost-with-the-bytes", ex=600)
    r.lpush(keys.queue("default"), b"\xff{not json")
    worker()
    wait_until(
        lambda: r.zcard(keys.dead(keys.home_of("default"))) == 4, message="four jobs in dead"
    )
    classes = sorted(j["error_class"] for j in dead_jobs(r))
    assert classes == ["InvalidPayload", "JSONDecodeError", "NotRegistered", "NotRegistered"]
    for key in held:
        wait_until(lambda key=key: not r.exists(key), message=f"{key} released")
    assert 0 < r.ttl(orphan_lock) <= 600  # nothing to release it by: its TTL will


def test_poison_job_sent_to_dead_by_orphan_recovery_releases_its_lock(worker, r):
    """A job past MAX_ORPHANINGS, found on the list of a dead process."""
    job, key = crafted(tj.record.path, "until_executed", orphan_count=3)
    dead_process = "gone-host:1234:abcd"
    r.rpush(keys.inprogress(dead_process, keys.home_of("default")), payload.encode(job))
    r.sadd(keys.inprogress_ids(), dead_process)
    r.hset(keys.last_beat(), dead_process, 0)
    r.set(key, job["jid"], ex=600)
    worker()
    wait_until(
        lambda: r.zcard(keys.dead(keys.home_of("default"))) == 1, message="the poison job in dead"
    )
    [filed] = dead_jobs(r)
    assert filed["jid"] == job["jid"] and filed["error_class"] == "OrphanedTooOften"
    wait_until(lambda: not r.exists(key), message="the lock to be released")
    assert r.llen(keys.inprogress(dead_process, keys.home_of("default"))) == 0


def test_while_executing_lock_of_a_killed_run_is_released_when_it_dies_as_poison(worker, r):
    """A while_executing run whose worker died leaves its lock behind; if the job then
    goes to dead as a poison job, that lock goes too (owner-checked)."""
    job, key = crafted(tj.record.path, "while_executing", orphan_count=3)
    dead_process = "gone-host:99:beef"
    r.rpush(keys.inprogress(dead_process, keys.home_of("default")), payload.encode(job))
    r.sadd(keys.inprogress_ids(), dead_process)
    r.hset(keys.last_beat(), dead_process, 0)
    r.set(key, job["jid"], ex=600)
    worker()
    wait_until(
        lambda: r.zcard(keys.dead(keys.home_of("default"))) == 1, message="the poison job in dead"
    )
    wait_until(lambda: not r.exists(key), message="the lock to be released")


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


def test_release_while_redis_is_away_goes_through_within_a_beat_of_its_return(
    worker, redis_server, configure, prefix
):
    beat = 1.0
    server = redis_server()
    configure(REDIS_URL=server.url)
    c = server.client()
    job = tj.sleeper.using(unique="until_executed")
    key = lock_of(RUN_SECONDS, func=tj.sleeper.path)
    w = worker(redis_url=server.url, settings={"HEARTBEAT_INTERVAL": beat})
    ident = re.search(r"identity=(\S+)", w.log()).group(1)
    jid = job.enqueue(RUN_SECONDS)
    wait_until(lambda: c.hexists(f"{prefix}:test:timeline", f"{jid}:start"), message="start")
    stop_keeping_data(server)  # Redis away (connection refused), its data kept
    # The job returns while Redis is away: its release fails and is deferred.
    w.wait_for_log(rf"Unique lock: release of {key} deferred", timeout=10)
    # Read before the worker can reach Redis again (stopped meanwhile): the lock came
    # back held, so what releases it below is the deferred release.
    w.signal(signal.SIGSTOP)
    try:
        server.start()
        c = server.client()
        assert c.get(key) == jid
        back = time.time()
    finally:
        w.signal(signal.SIGCONT)
    # Counted in the worker's beats, not in seconds: the release rides on the first
    # beat after Redis returned (presence written, then the deferred releases), so by
    # the time a second beat shows, the lock is gone however slow the machine.
    beats_while_held: set[str] = set()

    def released() -> bool:
        beat_at = c.hget(keys.process(ident), "beat")
        held = c.exists(key)
        if held and beat_at and float(beat_at) > back:
            beats_while_held.add(beat_at)
        return not held

    wait_until(released, 15, 0.01, message="the deferred release")
    assert len(beats_while_held) <= 1, f"held through beats {sorted(beats_while_held)}"
    assert w.proc.poll() is None


def test_a_release_waiting_for_redis_goes_through_at_shutdown(
    worker, redis_server, configure, prefix
):
    """A worker told to stop while a release waits for Redis: Redis back within the
    hand-over's retries, the release goes through before the process exits."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    c = server.client()
    job = tj.sleeper.using(unique="until_executed", unique_for=600)
    key = lock_of(RUN_SECONDS, func=tj.sleeper.path)
    w = worker(redis_url=server.url, settings={"HEARTBEAT_INTERVAL": 5})
    jid = job.enqueue(RUN_SECONDS)
    wait_until(lambda: c.hexists(f"{prefix}:test:timeline", f"{jid}:start"), message="start")
    stop_keeping_data(server)
    w.wait_for_log(rf"Unique lock: release of {key} deferred", timeout=10)
    w.signal(signal.SIGTERM)
    w.wait_for_log(r"Shutdown hand-over: Redis unavailable", timeout=10)
    server.start()
    assert w.wait(20) == 0
    c = server.client()
    assert not c.exists(key), (c.get(key), c.ttl(key), w.log()[-3000:])
    assert job.enqueue(RUN_SECONDS) is not None


def test_a_release_lost_with_its_process_lapses_at_the_ttl(worker, redis_server, configure, prefix):
    """Redis away for the whole shutdown: the deferred release dies with the process
    (memory only) and the lock lapses at its TTL (unique_for), never later."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    c = server.client()
    job = tj.sleeper.using(unique="until_executed", unique_for=4)
    key = lock_of(RUN_SECONDS, func=tj.sleeper.path)
    w = worker(redis_url=server.url)
    jid = job.enqueue(RUN_SECONDS)
    wait_until(lambda: c.hexists(f"{prefix}:test:timeline", f"{jid}:start"), message="start")
    stop_keeping_data(server)
    w.wait_for_log(rf"Unique lock: release of {key} deferred", timeout=10)
    w.signal(signal.SIGTERM)
    assert w.wait(30) == 0
    server.start()
    c = server.client()
    ttl = c.ttl(key)
    assert c.get(key) in (None, jid) and ttl <= 4, ttl
    wait_until(lambda: not c.exists(key), 6, message="the lock's TTL to lapse")
    assert job.enqueue(RUN_SECONDS) is not None


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
