"""Every key of the data model (docs/internals.md), set one at a time to a wrong type under
a running worker (private redis-server): the worker keeps processing, the key is quarantined
within one guard interval, and afterwards everything works.

One worker serves the whole module (the keys are checked in sequence) to keep it fast.
Not covered, by design: ``P:signal:<id>`` (a pub/sub channel, not a key) and the keys the
guard cannot enumerate cheaply, which all carry a TTL (``P:unique:<digest>``,
``P:periodic:lock:<name>:<slot>``, ``P:result:<id>``); see docs/operations.md.
"""

from __future__ import annotations

import re
import secrets
import time

import pytest
from testapp import jobs as tj

from cogworker_django.observe import stats
from cogworker_django.store import keys
from cogworker_django.worker import keyguard

from ..helpers import RedisServer, Worker, wait_until

GUARD_INTERVAL = 0.5
QUEUES = ["default", "other"]

# name -> (key builder taking the worker identity, the type it must hold)
KEYS = {
    "queues": (lambda i: keys.queues(), "set"),
    "queue": (lambda i: keys.queue("default"), "list"),
    "paused": (lambda i: keys.paused(keys.home_of("default")), "set"),
    "schedule": (lambda i: keys.schedule(keys.home_of("default")), "zset"),
    "retry": (lambda i: keys.retry(keys.home_of("default")), "zset"),
    "dead": (lambda i: keys.dead(keys.home_of("default")), "zset"),
    "processes": (lambda i: keys.processes(), "set"),
    "process": (lambda i: keys.process(i), "hash"),
    # Another live process's snapshot: this worker's own is rewritten whole by each of
    # its beats (DEL + HSET), which would heal it with no guard at all.
    "work": (lambda i: keys.work(OTHER), "hash"),
    "inprogress": (lambda i: keys.inprogress(i, keys.home_of("default")), "list"),
    "inprogress_ids": (lambda i: keys.inprogress_ids(), "set"),
    "last_beat": (lambda i: keys.last_beat(), "hash"),
    "live_queues": (lambda i: keys.live_queues(), "zset"),
    "unsettled": (lambda i: keys.unsettled(keys.home_of("default")), "list"),
    "stat_processed": (lambda i: keys.stat("processed"), "string"),
    "stat_failed": (lambda i: keys.stat("failed"), "string"),
    "stat_processed_day": (lambda i: keys.stat("processed", stats.today()), "string"),
    "periodic_schedule": (lambda i: keys.periodic_schedule(), "hash"),
    "periodic_disabled": (lambda i: keys.periodic_disabled(), "set"),
    "periodic_last_slot": (lambda i: keys.periodic_last_slot("nightly"), "string"),
    "periodic_running": (lambda i: keys.periodic_running("nightly"), "string"),
    "history": (lambda i: keys.history(), "stream"),
}
# A process listed beside the worker, alive (its presence key outlives the test) but
# not beating here: nobody but the key guard repairs its keys.
OTHER = "other:1:guarded"


@pytest.fixture(scope="module")
def guarded():
    server = RedisServer().start()
    prefix = f"kg{secrets.token_hex(4)}"
    w = Worker(
        prefix,
        redis_url=server.url,
        settings={"KEYGUARD_INTERVAL": GUARD_INTERVAL, "QUEUES": QUEUES, "CONCURRENCY": 2},
    ).start()
    yield server, w, prefix
    w.cleanup()
    server.cleanup()


@pytest.fixture
def setup(guarded, configure):
    server, w, prefix = guarded
    configure(REDIS_URL=server.url, PREFIX=prefix)
    r = server.client()
    r.hset(keys.periodic_schedule(), "nightly", "{}")  # an entry, for its per-entry keys
    r.sadd(keys.processes(), OTHER)
    r.hset(keys.process(OTHER), "busy", 0)
    r.expire(keys.process(OTHER), 300)
    identity = wait_until(lambda: re.search(r"identity=(\S+)", w.log()), 5).group(1)
    yield r, w, identity
    r.close()


def _corrupt(r, key: str, kind: str) -> str:
    """Give ``key`` a value of another type; returns that type."""
    r.delete(key)
    if kind == "string":
        r.rpush(key, "not a string")
        return "list"
    r.set(key, "not a " + kind)
    return "string"


def _copies(r, key):
    return [name for _ms, name in keyguard.copies(r, key)]


def _ran(r, token) -> bool:
    return r.hget(f"{keys.prefix()}:test:runs", token) == "1"


@pytest.mark.parametrize("name", list(KEYS))
def test_wrong_type_is_quarantined_and_work_goes_on(setup, name):
    r, w, identity = setup
    build, kind = KEYS[name]
    key = build(identity)
    before = len(_copies(r, key))
    wrong = _corrupt(r, key, kind)
    started = time.monotonic()
    during = f"{name}-during-{secrets.token_hex(3)}"
    tj.record.using(queue="other").enqueue(during)  # the worker keeps processing

    wait_until(
        lambda: len(_copies(r, key)) > before, GUARD_INTERVAL * 2 + 2, message=f"{key} quarantined"
    )
    assert r.type(_copies(r, key)[0]) == wrong  # the wrong value, kept aside (newest first)
    assert time.monotonic() - started < GUARD_INTERVAL * 2 + 2
    wait_until(lambda: _ran(r, during), 10, message="a job run while the key was wrong")
    # afterwards everything works, on the queue that may have been the broken key too
    after = f"{name}-after-{secrets.token_hex(3)}"
    tj.record.enqueue(after)
    wait_until(lambda: _ran(r, after), 10, message="a job run after the quarantine")
    line = f"Key guard: {key} held a {wrong}, not a {kind}: moved to"
    assert w.log().count(line) == len(_copies(r, key)), w.log()[-3000:]


def test_copies_are_pruned_to_five(setup):
    r, w, _identity = setup
    key = keys.paused(keys.home_of("default"))
    for i in range(7):
        before = {name for name in _copies(r, key)}
        r.set(key, f"wrong {i}")
        wait_until(lambda before=before: set(_copies(r, key)) - before, GUARD_INTERVAL * 2 + 2)
    # (the prune follows the move: give it its moment)
    copies = wait_until(lambda: len(_copies(r, key)) == 5 and _copies(r, key), 5)
    assert {r.get(c) for c in copies} == {f"wrong {i}" for i in range(2, 7)}


def test_afterwards_the_worker_is_whole(setup):
    r, w, identity = setup
    tokens = [f"final{i}" for i in range(20)]
    tj.record.enqueue_many([(t,) for t in tokens])
    tj.always_fails.using(retry=False).enqueue("last")
    wait_until(lambda: all(_ran(r, t) for t in tokens), 10, message="final jobs")
    wait_until(
        lambda: r.zcard(keys.dead(keys.home_of("default"))) == 1,
        10,
        message="a failure filed in dead",
    )

    def registries_back() -> bool:
        return (
            r.type(keys.process(identity)) == "hash"
            and r.sismember(keys.processes(), identity)
            and r.sismember(keys.inprogress_ids(), identity)
            and r.hexists(keys.last_beat(), identity)
            and r.zscore(keys.live_queues(), "default") is not None
            and r.sismember(keys.queues(), "default")
            and int(r.get(keys.stat("processed")) or 0) >= 20
            and r.xlen(keys.history()) >= 21
        )

    wait_until(registries_back, 10, message="registries, counters and history written again")
    assert w.proc.poll() is None
    log = w.log()
    assert "Traceback" not in log and " died" not in log, log[-4000:]
    assert w.stop() == 0
