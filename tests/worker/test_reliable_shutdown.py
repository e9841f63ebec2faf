"""TERM and the shutdown hand-over, in real worker processes. Settlement with reliable
fetch: unfinished jobs are requeued, a job whose ack failed is not run again,
finished-but-unfiled jobs go to ``P:unsettled`` and are filed by a live process, and a
hand-over that meets an outage is retried. A job interrupted at every stop ends in dead
(MAX_ORPHANINGS); async jobs through a SIGKILL and a TERM; the end-to-end smoke test."""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import pytest
from testapp import async_jobs as aj
from testapp import jobs as tj

from cogworker_django.conf import QueueSpec
from cogworker_django.core import payload
from cogworker_django.store import connection, keys, scripts
from cogworker_django.worker.fetch import ReliableFetch, Work
from cogworker_django.worker.ledger import Filing
from cogworker_django.worker.manager import Manager

from ..helpers import ReplyCutter, wait_until
from .test_reliable_fetch import Monitor


def counts(client, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in client.hgetall(f"{prefix}:test:runs").items()}


def test_term_during_long_jobs_requeues_the_unfinished_to_run_next(worker, r, prefix):
    tj.count_then_sleep.enqueue_many([(10, f"long{i}") for i in range(3)])
    tj.record.enqueue_many([(f"quick{i}",) for i in range(4)])
    w = worker(settings={"CONCURRENCY": 3, "SHUTDOWN_TIMEOUT": 1})
    wait_until(
        lambda: all(counts(r, prefix).get(f"long{i}") == 1 for i in range(3)),
        10,
        message="the long jobs started",
    )
    assert w.stop() == 0
    assert "requeued 3 job(s) unfinished at shutdown" in w.log()
    queue = [json.loads(x) for x in r.lrange(f"{prefix}:queue:default", 0, -1)]
    # The right end is taken next: the requeued jobs run before the waiting ones.
    assert [j["func"] for j in queue[-3:]] == ["testapp.jobs.count_then_sleep"] * 3
    assert [j["func"] for j in queue[:4]] == ["testapp.jobs.record"] * 4
    assert not r.keys(f"{prefix}:inprogress:*")
    w2 = worker(settings={"CONCURRENCY": 1})
    wait_until(
        lambda: (
            counts(r, prefix).get("long0", 0)
            + counts(r, prefix).get("long1", 0)
            + counts(r, prefix).get("long2", 0)
            >= 4
        ),
        10,
        message="a requeued job runs",
    )
    assert not any(k.startswith("quick") for k in counts(r, prefix))
    w2.kill()


def test_a_job_whose_ack_failed_is_not_run_again(worker, redis_server, configure, prefix):
    """The ack of a finished job is made to fail: writes are paused (CLIENT PAUSE WRITE)
    past the worker's 1.5 s socket timeout, so Redis drops the timed-out ack. TERM comes
    while the ack is still pending: the long jobs are requeued, the finished one is not,
    and a second worker runs only the long ones."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    client = server.client()
    settings = {
        "REDIS_OPTIONS": {"socket_timeout": 1.5},
        "CONCURRENCY": 3,
        "SHUTDOWN_TIMEOUT": 1,
    }
    tj.count_then_sleep.enqueue_many([(10, "long0"), (10, "long1"), (1.0, "short")])
    w = worker(redis_url=server.url, settings=settings)
    wait_until(
        lambda: all(counts(client, prefix).get(t) == 1 for t in ("long0", "long1", "short")),
        10,
        message="three jobs started",
    )
    (ident,) = client.smembers(f"{prefix}:processes")
    inprogress = f"{prefix}:inprogress:{ident}"
    (short,) = [
        job["jid"]
        for job in map(json.loads, client.lrange(inprogress, 0, -1))
        if job["args"][1] == "short"
    ]
    # What Redis runs from here that names "short" and the list: its acks.
    with Monitor(server, watch=(short, inprogress)) as mon:
        client.execute_command("CLIENT", "PAUSE", 3500, "WRITE")
        # "short" finishes inside the pause: its ack (with the next fetch: its threads all
        # busy until then, the worker fetches nothing else) times out.
        w.wait_for_log(r"Fetch: Redis unavailable \(TimeoutError", timeout=5)
        w.signal(signal.SIGTERM)
        assert w.wait(20) == 0
    # The fetch that carried the ack never ran; it was acked by the heartbeat's
    # retry or by the hand-over.
    handover, fetch = scripts.get("handover").sha, scripts.get("fetch").sha
    # (An ack the heartbeat sent while the pause held it may still run when the pause
    # ends, its reply timed out, and then its retry runs too: an ack is idempotent, the
    # LREM of that payload and the same result written again.)
    assert 1 <= len(mon.lines) <= 2, "\n".join(line[:300] for line in mon.lines)
    for ack in mon.lines:
        # (the fetch script asking for no job: the heartbeat's ack, keeping the run's result)
        assert ack.startswith((f"EVALSHA {fetch}", f"EVALSHA {handover}")), mon.lines
    log = w.log()
    assert "requeued 2 job(s) unfinished at shutdown" in log, log
    queued = [json.loads(x)["args"][1] for x in client.lrange(f"{prefix}:queue:default", 0, -1)]
    assert sorted(queued) == ["long0", "long1"], log
    assert not client.exists(f"{prefix}:inprogress:{ident}")
    w2 = worker(redis_url=server.url, settings={"CONCURRENCY": 3})
    wait_until(
        lambda: counts(client, prefix).get("long0") == 2 and counts(client, prefix)["long1"] == 2,
        10,
        message="the long jobs run again",
    )
    time.sleep(0.5)
    assert counts(client, prefix)["short"] == 1
    w2.kill()


def test_hand_over_is_retried_through_a_short_outage(worker, redis_server, configure, prefix):
    """Redis goes away just as the worker stops and is back 2 s later: the hand-over is
    retried, so the unfinished jobs are requeued at once (not left for orphan recovery)
    and nothing is lost (the server persists with appendfsync always)."""
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    client = server.client()
    tj.count_then_sleep.enqueue_many([(10, "long0"), (10, "long1")])
    w = worker(redis_url=server.url, settings={"CONCURRENCY": 2, "SHUTDOWN_TIMEOUT": 1})
    wait_until(
        lambda: all(counts(client, prefix).get(t) == 1 for t in ("long0", "long1")),
        10,
        message="both started",
    )
    (ident,) = client.smembers(f"{prefix}:processes")
    server.stop()
    w.signal(signal.SIGTERM)
    restarter = threading.Timer(2.0, server.start)
    restarter.start()
    try:
        assert w.wait(20) == 0
    finally:
        restarter.join()
    client = server.client()
    log = w.log()
    assert "Shutdown hand-over: Redis unavailable" in log, log
    assert "requeued 2 job(s) unfinished at shutdown" in log, log
    assert client.llen(f"{prefix}:queue:default") == 2
    assert not client.exists(f"{prefix}:inprogress:{ident}")


def test_jobs_a_fetch_brings_back_after_the_stop_began_are_requeued_not_run(
    worker, redis_server, configure, prefix
):
    """Fetched, not started: the fetch that takes jobs for the idle threads ran in Redis,
    but its reply is held back on the way (a real proxy) until TERM has been received.
    The worker waits for that fetch, runs none of its jobs, and the hand-over puts them
    back; the fetch took at most one job per thread, not more. (It asks for the threads
    free when it is sent: on a starved machine a thread may not have checked in yet when
    the first fetch after boot goes out, so it can be fewer than three.) Production beat
    interval: no heartbeat reconcile comes within the test's window."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    client = server.client()
    proxy = ReplyCutter(server)
    try:
        w = worker(redis_url=proxy.url, settings={"CONCURRENCY": 3, "HEARTBEAT_INTERVAL": 5})
        proxy.hold(b"testapp.jobs.record")
        jids = tj.record.enqueue_many([(f"j{i}",) for i in range(5)])
        assert proxy.held.wait(10), "no fetch took the jobs"
        (ident,) = client.smembers(f"{prefix}:processes")
        taken = client.llen(f"{prefix}:inprogress:{ident}")
        assert 1 <= taken <= 3, taken  # at most one per thread
        assert client.llen(f"{prefix}:queue:default") == 5 - taken
        w.signal(signal.SIGTERM)
        w.wait_for_log("SIGTERM received: stopping")
        proxy.release()
        assert w.wait(20) == 0
    finally:
        proxy.close()
    log = w.log()
    assert f"requeued {taken} job(s) unfinished at shutdown" in log, log
    assert counts(client, prefix) == {}  # none of them ran
    queued = [json.loads(x)["jid"] for x in client.lrange(f"{prefix}:queue:default", 0, -1)]
    assert sorted(queued) == sorted(jids)
    assert not client.exists(f"{prefix}:inprogress:{ident}")


# The hand-over itself, against Redis, without a process around it ---------------------


def _manager(identity: str) -> Manager:
    fetcher = ReliableFetch(identity, (QueueSpec("default", 1), QueueSpec("low", 1)))
    return Manager(identity, fetcher, 1)


def _raw(token: str, queue: str = "default") -> str:
    return payload.encode(payload.build("testapp.jobs.record", [token], queue=queue))


def test_hand_over_script_settles_each_kind_of_job(prefix):
    """One call: an acked-but-unconfirmed job is dropped, a finished-but-unfiled one goes
    to P:unsettled, everything else on the list (unfinished, a lost fetch reply, both
    copies of a twin, bytes that are not even UTF-8) goes back to its queue."""
    ident = "handover:1:x"
    m = _manager(ident)
    unfinished, low_job = _raw("u"), _raw("l", queue="low")
    acked, unfiled, lost_reply, twin = _raw("a"), _raw("f"), _raw("lost"), _raw("twin")
    garbage = b"\xff not json"
    client = connection.get_client()  # bytes in, bytes out
    key = keys.inprogress(ident, keys.home_of("default"))
    client.rpush(key, unfinished, low_job, acked, unfiled, lost_reply, twin, twin, garbage)
    works = {}
    for raw, queue in (
        (unfinished, "default"),
        (low_job, "low"),
        (acked, "default"),
        (unfiled, "default"),
        (twin, "default"),
        (twin, "default"),
    ):
        works[raw] = Work(queue, raw)
        m.ledger.start(works[raw], "processor-0")
    for raw in (acked, unfiled):
        assert m.ledger.performed(works[raw])
    m.ledger.ack_later(works[acked])  # an ack whose fetch failed
    filing = Filing("retry", time.time() + 60, _raw("f-retried"))
    m.ledger.file_later(works[unfiled], filing)  # a filing Redis refused

    m.fetcher.hand_over(connection.get_client(), m.ledger)

    assert client.llen(key) == 0
    default = client.lrange(keys.queue("default"), 0, -1)
    # What was running comes back counted as interrupted (orphan_count 1, requeue.py's
    # HandedBack); a lost fetch reply and bytes that are no payload come back as they were.
    untouched = sorted(x for x in default if x in (lost_reply.encode(), garbage))
    assert untouched == sorted([lost_reply.encode(), garbage])
    counted = [json.loads(x) for x in default if x not in untouched]
    assert sorted(j["jid"] for j in counted) == sorted(
        json.loads(x)["jid"] for x in (unfinished, twin, twin)
    )
    assert all(j["orphan_count"] == 1 for j in counted)
    (low,) = client.lrange(keys.queue("low"), 0, -1)
    assert json.loads(low)["jid"] == json.loads(low_job)["jid"]
    (entry,) = client.lrange(keys.unsettled(keys.home_of("default")), 0, -1)
    entry = json.loads(entry)
    assert entry["target"] == "retry" and entry["payload"] == filing.payload
    assert m.ledger.pending() == []


def test_hand_over_keeps_the_list_when_redis_is_away(worker, redis_server, configure, prefix):
    """Redis is away for the whole of a stopping worker's shutdown (persistent, so it
    comes back with what it had): the hand-over is retried, gives up, and the worker
    exits with its list as it was. A worker started afterwards recovers both jobs (the
    one that finished, whose ack never went, and the unfinished one) by orphan recovery
    after ORPHAN_THRESHOLD, and runs them again."""
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    client = server.client()
    settings = {"CONCURRENCY": 2, "SHUTDOWN_TIMEOUT": 1}
    tj.count_then_sleep.enqueue_many([(1.0, "finished"), (30, "unfinished")])
    w = worker(redis_url=server.url, settings=settings)
    wait_until(
        lambda: all(counts(client, prefix).get(t) == 1 for t in ("finished", "unfinished")),
        10,
        message="both started",
    )
    (ident,) = client.smembers(f"{prefix}:processes")
    server.stop()
    # "finished" ends while Redis is away: its ack (with the next fetch) fails.
    w.wait_for_log(r"Fetch: Redis unavailable", timeout=10)
    w.signal(signal.SIGTERM)
    w.wait(30)
    log = w.log()
    assert "Shutdown hand-over: Redis unavailable" in log, log
    assert "shutdown hand-over failed" in log and "recovered after ORPHAN_THRESHOLD" in log, log
    server.start()
    client = server.client()
    listed = [
        json.loads(x)["args"][1] for x in client.lrange(f"{prefix}:inprogress:{ident}", 0, -1)
    ]
    assert sorted(listed) == ["finished", "unfinished"]
    assert client.llen(f"{prefix}:queue:default") == 0
    w2 = worker(redis_url=server.url, settings=settings)
    w2.wait_for_log(rf"recovered 2 job\(s\) from dead process {re.escape(ident)}", timeout=20)
    wait_until(
        lambda: all(counts(client, prefix).get(t) == 2 for t in ("finished", "unfinished")),
        10,
        message="both run again",
    )
    assert not client.exists(f"{prefix}:inprogress:{ident}")
    ident2 = re.search(r"identity=(\S+)", w2.log()).group(1)
    mine = [json.loads(x) for x in client.lrange(f"{prefix}:inprogress:{ident2}", 0, -1)]
    (running,) = [j for j in mine if j["args"][1] == "unfinished"]
    assert running["orphan_count"] == 1  # requeued by orphan recovery, not the hand-over
    w2.kill()


def test_unsettled_entries_are_filed_by_a_live_worker_and_never_run(worker, r, prefix):
    job = payload.build("testapp.jobs.record", ["never-run"], jid="unsettled1")
    job["retry_count"] = 1
    entry = Filing("dead", time.time(), payload.encode(job)).unsettled_entry()
    r.rpush(f"{prefix}:unsettled", entry, "{broken entry")
    w = worker()
    wait_until(lambda: r.zcard(f"{prefix}:dead") == 2, 10, message="both filed in dead")
    assert r.llen(f"{prefix}:unsettled") == 0
    dead = {json.loads(m)["jid"]: json.loads(m) for m in r.zrange(f"{prefix}:dead", 0, -1)}
    assert dead["unsettled1"]["args"] == ["never-run"]
    (wrapper,) = [d for jid, d in dead.items() if jid != "unsettled1"]
    assert wrapper["error_class"] == "InvalidUnsettledEntry"
    assert wrapper["raw_payload"] == "{broken entry"
    time.sleep(0.5)
    assert not r.exists(f"{prefix}:test:runs")
    assert w.stop() == 0


def test_keys_of_the_handover_are_the_documented_ones(prefix):
    assert keys.unsettled(keys.home_of("default")) == f"{prefix}:unsettled"
    assert keys.inprogress("x", keys.home_of("default")) == f"{prefix}:inprogress:x"


# End-to-end smoke: a real worker runs pushed jobs and stops cleanly on TERM.


def test_worker_runs_jobs_and_stops_on_term(worker, r, prefix):
    tokens = [f"t{i}" for i in range(20)]
    tj.record.enqueue_many([(t,) for t in tokens])
    w = worker()
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 20, 20, message="20 runs")
    assert all(v == "1" for v in r.hgetall(f"{prefix}:test:runs").values())
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    assert r.scard(f"{prefix}:processes") == 0
    assert not r.exists(f"{prefix}:inprogress_ids") or r.scard(f"{prefix}:inprogress_ids") == 0


# A job interrupted by its worker's stop counts it as an orphaning: one that never
# finishes is requeued at each stop up to MAX_ORPHANINGS (the production default, 3), then
# goes to dead instead of coming back after every restart, forever. The shutdown line
# names it and says how to give it a time limit.


# A job that never finishes within the (short) shutdown timeout: an infinite loop's stand-in.
FOREVER = 3600


def _runs(r, token):
    return int(r.hget(f"{keys.prefix()}:test:runs", token) or 0)


@pytest.mark.parametrize("fetch", ["reliable", "basic"])
def test_a_job_interrupted_at_every_stop_ends_in_dead(worker, r, fetch):
    jid = tj.count_then_sleep.enqueue(FOREVER, "spin")
    dead_key = keys.dead(keys.home_of("default"))
    settings = {"SHUTDOWN_TIMEOUT": 0.3}  # MAX_ORPHANINGS: the default, 3
    for stop in range(1, 4):  # three stops: requeued each time, counted
        w = worker(settings=settings, args=["--fetch", fetch])
        wait_until(lambda n=stop: _runs(r, "spin") == n, 20, message=f"run {stop}")
        assert w.stop() == 0
        log = w.log()
        line = next(x for x in log.splitlines() if "unfinished at shutdown" in x)
        assert f"testapp.jobs.count_then_sleep (jid {jid}, interrupted {stop}x)" in line, line
        assert "MAX_ORPHANINGS (3)" in line and "@job(timeout=...)" in line, line
        assert "still running (testapp.jobs.count_then_sleep" in log
        (queued,) = r.lrange(keys.queue("default"), 0, -1)
        assert json.loads(queued)["orphan_count"] == stop
        assert r.zcard(dead_key) == 0
    w = worker(settings=settings, args=["--fetch", fetch])  # the fourth stop: dead
    wait_until(lambda: _runs(r, "spin") == 4, 20, message="run 4")
    assert w.stop() == 0
    assert r.llen(keys.queue("default")) == 0
    (dead,) = [json.loads(x) for x in r.zrange(dead_key, 0, -1)]
    assert dead["jid"] == jid and dead["error_class"] == "OrphanedTooOften"
    assert "interrupted 3 times by a worker's stop" in dead["error_message"]
    assert "@job(timeout=...)" in dead["error_message"]
    assert f"(jid {jid}) filed in dead" in w.log()
    w = worker(settings=settings, args=["--fetch", fetch])  # nothing comes back
    w.wait_for_log(r"cogworker \S+ started")
    assert w.stop() == 0
    assert _runs(r, "spin") == 4


def test_an_async_job_cancelled_at_the_stop_is_counted_too(worker, r):
    """TERM cancels a coroutine still running past SHUTDOWN_TIMEOUT and requeues it: an
    interruption like a thread's."""
    from testapp import async_jobs

    jid = async_jobs.started_then_waits.enqueue(FOREVER, "coro")
    w = worker(settings={"SHUTDOWN_TIMEOUT": 0.3})
    wait_until(lambda: r.hget(async_jobs.key("starts"), "coro") == "1", 20, message="start")
    assert w.stop() == 0
    (queued,) = [json.loads(x) for x in r.lrange(keys.queue("default"), 0, -1)]
    assert queued["jid"] == jid and queued["orphan_count"] == 1
    assert f"async_jobs.started_then_waits (jid {jid}, interrupted 1x)" in w.log()


# Async jobs through a worker's death and its stop: a SIGKILL with a hundred coroutines
# running loses none (the in-progress list is the record: the next worker runs every one
# again); TERM lets running coroutines finish within SHUTDOWN_TIMEOUT (production value)
# and cancels and requeues the rest, none lost and none both requeued and filed.


def counted(r, prefix, name) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:{name}").items()}


def test_sigkill_with_a_hundred_coroutines_running_loses_none(worker, r, prefix):
    tokens = [f"k-{i}" for i in range(100)]
    aj.long_first_run.enqueue_many([(t,) for t in tokens])
    first = worker()
    wait_until(lambda: len(counted(r, prefix, "starts")) == 100, 30, message="100 running")
    assert any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*"))
    first.kill()  # SIGKILL: no hand-over, nothing settled
    assert counts(r, prefix) == {}
    second = worker()  # recovers the dead process's list after ORPHAN_THRESHOLD
    wait_until(lambda: len(counts(r, prefix)) == 100, 60, message="every job run again")
    assert second.stop() == 0
    assert counts(r, prefix) == {t: 1 for t in tokens}
    assert counted(r, prefix, "starts") == {t: 2 for t in tokens}
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0


def test_term_finishes_what_can_finish_and_requeues_the_rest(worker, r, prefix):
    quick = [f"q-{i}" for i in range(20)]
    stuck = [f"s-{i}" for i in range(20)]
    aj.started_then_waits.enqueue_many([(2.0, t) for t in quick])
    aj.long_first_run.enqueue_many([(t,) for t in stuck])
    # Production SHUTDOWN_TIMEOUT (25 s).
    w = worker(settings={"SHUTDOWN_TIMEOUT": 25})
    wait_until(
        lambda: len(counted(r, prefix, "starts")) == 40, 30, message="all 40 coroutines running"
    )
    assert w.stop(60) == 0
    log = w.log()
    # The quick ones finished within the timeout, once each; the stuck ones were
    # cancelled (their finally blocks ran) and requeued, none filed.
    assert {t: counts(r, prefix).get(t) for t in quick} == {t: 1 for t in quick}
    assert not any(t in counts(r, prefix) for t in stuck)
    assert {t: counted(r, prefix, "unwound").get(t) for t in stuck} == {t: 1 for t in stuck}
    assert "shutdown timeout: 20 job(s) still running" in log
    assert re.search(r"requeued 20 job\(s\) unfinished at shutdown", log), log
    queued = [json.loads(x) for x in r.lrange(f"{prefix}:queue:default", 0, -1)]
    assert sorted(j["args"][0] for j in queued) == sorted(stuck)
    assert not any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*"))
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    # One line for the 20 cancelled coroutines, not one each.
    assert log.count("cancelled 20 coroutine(s) still running at the stop") == 1
    assert "ended after the shutdown hand-over requeued it" not in log
    # The next worker runs each requeued job once.
    again = worker()
    wait_until(lambda: all(counts(r, prefix).get(t) == 1 for t in stuck), 30, message="requeued")
    assert again.stop() == 0
    assert {t: counted(r, prefix, "starts").get(t) for t in stuck} == {t: 2 for t in stuck}
    assert set(counts(r, prefix).values()) == {1}
