"""Unique locks are never wedged: a job that leaves by any path releases its lock, the
job filed in dead included, on the in-process worker. (A worker killed mid-run leaves
the lock to orphan recovery, or to its TTL: tests/worker/test_killed_mid_run.py; a
release that fails while Redis is away goes through on the first heartbeat after it
returns: tests/worker/test_faults_outage.py. Both need worker processes.)"""

import json
import time

from testapp import jobs as tj

from cogworker_django.core import payload, unique
from cogworker_django.store import keys

from ..helpers import wait_until
from .unique_helpers import lock_of


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


def test_terminal_failure_releases_the_lock_and_a_retried_one_extends_it(inworker, r):
    # unique_for is long enough to outlast the first run on a loaded machine (the lock
    # must still be there when it fails), and shorter than the extension that follows.
    job = tj.always_fails.using(unique="until_executed", retry=1, unique_for=30)
    key = lock_of("x", func=tj.always_fails.path)
    inworker(settings={"RETRY_BACKOFF": "testapp.jobs.backoff_2s"})
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


def test_unregistered_and_queueless_jobs_sent_to_dead_release_their_locks(inworker, r):
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
    inworker()
    wait_until(
        lambda: r.zcard(keys.dead(keys.home_of("default"))) == 4, message="four jobs in dead"
    )
    classes = sorted(j["error_class"] for j in dead_jobs(r))
    assert classes == ["InvalidPayload", "JSONDecodeError", "NotRegistered", "NotRegistered"]
    for key in held:
        wait_until(lambda key=key: not r.exists(key), message=f"{key} released")
    assert 0 < r.ttl(orphan_lock) <= 600  # nothing to release it by: its TTL will


def test_poison_job_sent_to_dead_by_orphan_recovery_releases_its_lock(inworker, r):
    """A job past MAX_ORPHANINGS, found on the list of a dead process."""
    job, key = crafted(tj.record.path, "until_executed", orphan_count=3)
    dead_process = "gone-host:1234:abcd"
    r.rpush(keys.inprogress(dead_process, keys.home_of("default")), payload.encode(job))
    r.sadd(keys.inprogress_ids(), dead_process)
    r.hset(keys.last_beat(), dead_process, 0)
    r.set(key, job["jid"], ex=600)
    inworker()
    wait_until(
        lambda: r.zcard(keys.dead(keys.home_of("default"))) == 1, message="the poison job in dead"
    )
    [filed] = dead_jobs(r)
    assert filed["jid"] == job["jid"] and filed["error_class"] == "OrphanedTooOften"
    wait_until(lambda: not r.exists(key), message="the lock to be released")
    assert r.llen(keys.inprogress(dead_process, keys.home_of("default"))) == 0


def test_while_executing_lock_of_a_killed_run_is_released_when_it_dies_as_poison(inworker, r):
    """A while_executing run whose worker died leaves its lock behind; if the job then
    goes to dead as a poison job, that lock goes too (owner-checked)."""
    job, key = crafted(tj.record.path, "while_executing", orphan_count=3)
    dead_process = "gone-host:99:beef"
    r.rpush(keys.inprogress(dead_process, keys.home_of("default")), payload.encode(job))
    r.sadd(keys.inprogress_ids(), dead_process)
    r.hset(keys.last_beat(), dead_process, 0)
    r.set(key, job["jid"], ex=600)
    inworker()
    wait_until(
        lambda: r.zcard(keys.dead(keys.home_of("default"))) == 1, message="the poison job in dead"
    )
    wait_until(lambda: not r.exists(key), message="the lock to be released")
