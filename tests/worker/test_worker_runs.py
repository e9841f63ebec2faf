"""A real (in-process) worker runs every job it is given exactly once, over weighted and paused
queues; bad payloads go to dead with their bytes; stats, presence and the work snapshot
are written in batches and removed at a clean exit; a dead processor thread is replaced."""

from __future__ import annotations

import json
import os
import random
import re
import sys
import time
from collections import Counter

import redis
from testapp import jobs as tj

from cogworker_django.conf import QueueSpec
from cogworker_django.observe import stats
from cogworker_django.worker.fetch import weighted_order

from ..helpers import MAIN_REDIS_URL, wait_until


def runs(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def dead_jobs(r, prefix) -> list[dict]:
    return [json.loads(m) for m in r.zrange(f"{prefix}:dead", 0, -1)]


def test_1000_jobs_over_three_weighted_queues_each_run_once(inworker, r, prefix):
    tokens = {q: [f"{q}-{i}" for i in range(n)] for q, n in (("a", 500), ("b", 300), ("c", 200))}
    for q, ts in tokens.items():
        tj.record.using(queue=q).enqueue_many([(t,) for t in ts])
    w = inworker(queues=[QueueSpec("a", 3), QueueSpec("b", 2), "c"], concurrency=8)
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 1000, 60, message="1000 distinct runs")
    w.stop()
    counts = runs(r, prefix)
    assert len(counts) == 1000
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
    for q in tokens:
        assert r.llen(f"{prefix}:queue:{q}") == 0
    # Nothing left behind: no in-progress list, no presence.
    assert not r.keys(f"{prefix}:inprogress:*")
    assert r.scard(f"{prefix}:processes") == 0


def test_weighted_order_favours_heavier_queues():
    """Unit: the first queue tried is drawn in proportion to the weights; every queue
    appears once in each order."""
    rng_state = random.getstate()
    random.seed(12345)
    try:
        queues = (QueueSpec("a", 3), QueueSpec("b", 1))
        firsts = Counter(weighted_order(queues)[0] for _ in range(4000))
        orders = {tuple(weighted_order(queues)) for _ in range(200)}
    finally:
        random.setstate(rng_state)
    assert 0.70 < firsts["a"] / 4000 < 0.80, firsts
    assert orders == {("a", "b"), ("b", "a")}
    assert weighted_order((QueueSpec("only", 5),)) == ["only"]


def test_paused_queue_is_not_fetched_until_resumed(inworker, r, prefix):
    r.sadd(f"{prefix}:paused", "slowlane")
    w = inworker(queues=[QueueSpec("slowlane", 5), "default"])
    tj.record.using(queue="slowlane").enqueue_many([(f"p{i}",) for i in range(5)])
    tj.record.enqueue_many([(f"d{i}",) for i in range(5)])
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 5, 10, message="default's 5 runs")
    time.sleep(1.0)  # several fetch rounds: the paused queue must stay untouched
    assert r.llen(f"{prefix}:queue:slowlane") == 5
    assert set(runs(r, prefix)) == {f"d{i}" for i in range(5)}
    r.srem(f"{prefix}:paused", "slowlane")
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 10, 10, message="resumed queue drained")
    assert r.llen(f"{prefix}:queue:slowlane") == 0
    w.stop()


def test_paused_queue_with_basic_fetch(inworker, r, prefix):
    r.sadd(f"{prefix}:paused", "slowlane")
    w = inworker(queues=["slowlane", "default"], fetch="basic")
    tj.record.using(queue="slowlane").enqueue_many([(f"p{i}",) for i in range(3)])
    tj.record.enqueue("d0")
    wait_until(lambda: runs(r, prefix).get("d0") == 1, 10, message="the default job")
    time.sleep(1.0)
    assert r.llen(f"{prefix}:queue:slowlane") == 3
    r.srem(f"{prefix}:paused", "slowlane")
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 4, 10, message="resumed queue drained")
    w.stop()


def test_async_job_runs(inworker, r, prefix):
    w = inworker()
    tj.async_record.enqueue("async-1")
    wait_until(lambda: runs(r, prefix).get("async-1") == 1, 10, message="the async job")
    w.stop()


def test_unregistered_func_and_garbage_payload_go_to_dead_and_worker_goes_on(
    inworker, worker_log, r, prefix
):
    garbage = b"\xff\xfe{not json at all"
    evil = json.dumps(
        {"jid": "evil1", "func": "os.system", "args": ["touch /tmp/pwned"], "kwargs": {}}
    )
    rb = redis.Redis.from_url(MAIN_REDIS_URL)
    try:
        rb.lpush(f"{prefix}:queue:default", garbage)
        rb.lpush(f"{prefix}:queue:default", evil)
        rb.lpush(f"{prefix}:queue:default", b"[1, 2, 3]")
    finally:
        rb.close()
    w = inworker()
    wait_until(lambda: r.zcard(f"{prefix}:dead") == 3, 10, message="3 jobs in dead")
    tj.record.enqueue_many([(f"after{i}",) for i in range(5)])
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 5, 10, message="later jobs run")
    dead = {d.get("jid"): d for d in dead_jobs(r, prefix)}
    evil_dead = dead.pop("evil1")
    assert evil_dead["error_class"] == "NotRegistered"
    assert "'os.system' is not a registered job" in evil_dead["error_message"]
    # ... saying where a worker finds jobs
    assert (
        "the jobs.py and tasks.py modules of installed apps and of the modules in "
        "COGWORKER['JOB_MODULES']"
    ) in evil_dead["error_message"]
    assert evil_dead["args"] == ["touch /tmp/pwned"]  # kept as it was
    unparseable = sorted(dead.values(), key=lambda d: d["error_class"])
    assert [d["func"] for d in unparseable] == ["(unparseable)", "(unparseable)"]
    by_class = {d["error_class"]: d for d in unparseable}
    assert by_class["JSONDecodeError"]["raw_payload"] == "\\xff\\xfe{not json at all"
    assert by_class["InvalidPayload"]["raw_payload"] == "[1, 2, 3]"
    assert by_class["JSONDecodeError"]["queue"] == "default"
    assert r.llen(f"{prefix}:queue:default") == 0
    # A run's ack leaves with the next fetch (one round trip with it: worker/dispatch.py),
    # so the last jobs' acks may still be on their way when their bodies have run: wait
    # for them (the list empties within an idle poll, FETCH_IDLE_MAX_INTERVAL).
    wait_until(
        lambda: all(r.llen(k) == 0 for k in r.keys(f"{prefix}:inprogress:*")),
        10,
        message="the acks of the later jobs",
    )
    log = worker_log.log()
    assert "os.system (jid evil1) is not a registered job" in log
    w.stop()


def test_garbage_bytes_are_kept_exactly(inworker, r, prefix):
    """The raw bytes of an undecodable payload survive into dead (escaped, never lost)."""
    garbage = b"\x80\x81 binary \x00 junk"
    rb = redis.Redis.from_url(MAIN_REDIS_URL)
    try:
        rb.lpush(f"{prefix}:queue:default", garbage)
    finally:
        rb.close()
    w = inworker()
    wait_until(lambda: r.zcard(f"{prefix}:dead") == 1, 10, message="garbage in dead")
    (dead,) = dead_jobs(r, prefix)
    assert dead["func"] == "(unparseable)"
    raw = dead["raw_payload"]
    assert "binary" in raw and "junk" in raw
    # Undecodable bytes are escaped, not dropped: the original is recoverable.
    restored = raw.encode("utf-8", "surrogateescape")
    assert b"binary \x00 junk" in restored
    assert "\\x80\\x81" in raw or "\udc80\udc81" in raw
    w.stop()


def test_exception_whose_str_raises_is_still_recorded(inworker, worker_log, r, prefix):
    tj.raises_broken_str.enqueue()
    tj.raises_keyboard_interrupt.enqueue()
    w = inworker()
    wait_until(lambda: r.zcard(f"{prefix}:dead") == 2, 10, message="both in dead")
    dead = {d["func"].rsplit(".", 1)[1]: d for d in dead_jobs(r, prefix)}
    broken = dead["raises_broken_str"]
    assert broken["error_class"] == "testapp.jobs.BrokenStr"
    assert "str() raised" in broken["error_message"]
    assert "BrokenStr" in broken["traceback"]
    # A KeyboardInterrupt raised by a job is that job's failure, not the thread's death.
    ki = dead["raises_keyboard_interrupt"]
    assert ki["error_class"] == "KeyboardInterrupt"
    assert "died" not in worker_log.log()
    tj.record.enqueue("after")
    wait_until(lambda: runs(r, prefix).get("after") == 1, 10, message="next job")
    w.stop()


def test_stats_are_flushed_in_batches_and_at_exit(inworker, r, prefix):
    # A long beat interval: counts written while running come only from the batch flush
    # at shutdown (the first beat runs before any job).
    w = inworker(settings={"HEARTBEAT_INTERVAL": 30})
    tj.record.enqueue_many([(f"s{i}",) for i in range(30)])
    tj.fails_once_dead.enqueue()
    tj.fails_once_dead.enqueue()
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 30, 10, message="30 runs")
    wait_until(lambda: r.zcard(f"{prefix}:dead") == 2, 10, message="2 failures")
    time.sleep(0.3)
    # Nothing per job: no counter written yet.
    assert r.get(f"{prefix}:stat:processed") is None
    assert r.get(f"{prefix}:stat:failed") is None
    w.stop()
    day = stats.today()
    assert r.get(f"{prefix}:stat:processed") == "30"
    assert r.get(f"{prefix}:stat:failed") == "2"
    assert r.get(f"{prefix}:stat:processed:{day}") == "30"
    assert r.get(f"{prefix}:stat:failed:{day}") == "2"
    assert 0 < r.ttl(f"{prefix}:stat:processed:{day}") <= stats.DAY_KEY_TTL


def test_stats_flushed_by_the_heartbeat_while_running(inworker, r, prefix):
    w = inworker()
    tj.record.enqueue_many([(f"s{i}",) for i in range(10)])
    wait_until(lambda: r.get(f"{prefix}:stat:processed") == "10", 10, message="flushed by a beat")
    w.stop()
    assert r.get(f"{prefix}:stat:processed") == "10"


def test_presence_and_work_snapshot_while_running_removed_at_exit(inworker, r, prefix):
    tj.slow.enqueue(3, "snap")
    w = inworker(tag="snaptest")
    ident = wait_until(lambda: r.smembers(f"{prefix}:processes"), 5, message="registered")
    (ident,) = ident
    presence = f"{prefix}:process:{ident}"
    work = f"{prefix}:work:{ident}"
    wait_until(lambda: r.hget(presence, "busy") == "1", 5, message="busy=1")
    info = json.loads(r.hget(presence, "info"))
    assert info["pid"] == os.getpid()
    assert info["tag"] == "snaptest"
    assert info["concurrency"] == 5
    assert info["queues"] == ["default:1"]
    for field in ("hostname", "started_at", "version", "rss_kb"):
        assert field in info
    assert r.hget(presence, "quiet") == "false"
    assert 0 < r.ttl(presence) <= 4
    snapshot = wait_until(lambda: r.hgetall(work), 5, message="work snapshot")
    (entry,) = snapshot.values()
    entry = json.loads(entry)
    assert entry["queue"] == "default"
    assert json.loads(entry["payload"])["func"] == "testapp.jobs.slow"
    assert 0 < r.ttl(work) <= 4
    assert "default" in r.smembers(f"{prefix}:queues")
    assert r.zscore(f"{prefix}:live_queues", "default") is not None
    wait_until(lambda: runs(r, prefix).get("snap") == 1, 10, message="the slow job")
    w.stop()
    assert not r.exists(presence)
    assert not r.exists(work)
    assert ident not in r.smembers(f"{prefix}:processes")
    assert ident not in r.smembers(f"{prefix}:inprogress_ids")
    assert not r.exists(f"{prefix}:inprogress:{ident}")
    assert r.hget(f"{prefix}:last_beat", ident) is None


def test_dead_processor_thread_is_replaced_and_logged(inworker, worker_log, r, prefix):
    w = inworker(concurrency=2)
    tj.crash_processor_thread.enqueue("crash")
    worker_log.wait_for_log(r"processor-\d died: RuntimeError: processor crash injected", 10)
    worker_log.wait_for_log(r"processor-\d died; starting a replacement", 10)
    # Full strength again: two jobs run side by side (their runs overlap, by their own
    # start and end stamps, however slow the machine).
    a, b = (tj.timed.enqueue(1.5, t) for t in ("x1", "x2"))
    wait_until(
        lambda: runs(r, prefix).get("x1") == 1 and runs(r, prefix).get("x2") == 1,
        20,
        message="both timed jobs",
    )
    s = r.hgetall(f"{prefix}:test:timeline")
    assert float(s[f"{a}:start"]) < float(s[f"{b}:end"]), "the two jobs did not overlap"
    assert float(s[f"{b}:start"]) < float(s[f"{a}:end"]), "the two jobs did not overlap"
    # The job that was running when its thread died is run again (at least once).
    wait_until(lambda: runs(r, prefix).get("crash", 0) >= 2, 10, message="the crashed job re-run")
    w.stop()
    assert re.search(
        r"requeued 1 job\(s\) this process had taken without knowing it", worker_log.log()
    )


def test_an_unregistered_module_is_never_imported(inworker, r, prefix, capfd):
    """``this`` prints the Zen of Python when imported: the worker's output must not
    show it, for a payload naming a function in it, nor its process hold the module."""
    sys.modules.pop("this", None)  # as in a fresh process
    rb = redis.Redis.from_url(MAIN_REDIS_URL)
    try:
        rb.lpush(
            f"{prefix}:queue:default",
            json.dumps({"jid": "zen", "func": "this.s", "args": [], "kwargs": {}}),
        )
    finally:
        rb.close()
    w = inworker()
    wait_until(lambda: r.zcard(f"{prefix}:dead") == 1, 10, message="in dead")
    w.stop()
    assert "this" not in sys.modules
    assert "Beautiful is better than ugly" not in "".join(capfd.readouterr())
    (dead,) = dead_jobs(r, prefix)
    assert dead["error_class"] == "NotRegistered"
