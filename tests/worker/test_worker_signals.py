"""Signals with real processes: TERM/INT stop gracefully and requeue what is unfinished,
a second TERM cuts the wait short, TSTP quiets, TTIN logs stacks; ``--processes``; the
admin's Quiet and Stop through pub/sub."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
from testapp import jobs as tj

from cogworker_django.api import ProcessSet, Workers
from cogworker_django.store import keys
from cogworker_django.worker.launcher import DUPLICATE_SIGNAL_WINDOW

from ..helpers import ROOT, wait_until


def runs(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def test_term_during_long_job_requeues_it_and_a_new_worker_runs_it(worker, r, prefix):
    tj.count_then_sleep.enqueue(10, "long")
    raw = r.lindex(f"{prefix}:queue:default", 0)
    w = worker(settings={"SHUTDOWN_TIMEOUT": 2})
    wait_until(lambda: runs(r, prefix).get("long") == 1, 10, message="the job started")
    started = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    took = time.monotonic() - started
    assert took < 5, f"shutdown took {took:.1f}s"
    # Back on its queue, as it was but for its count of interruptions (and its enqueue
    # time), and nowhere else.
    (back,) = r.lrange(f"{prefix}:queue:default", 0, -1)
    back, was = json.loads(back), json.loads(raw)
    assert back.pop("orphan_count") == 1 and "orphan_count" not in was
    assert {k: v for k, v in back.items() if k != "enqueued_at"} == {
        k: v for k, v in was.items() if k != "enqueued_at"
    }
    assert not r.keys(f"{prefix}:inprogress:*")
    assert r.scard(f"{prefix}:processes") == 0
    log = w.log()
    assert re.search(
        r"shutdown timeout: 1 job\(s\) still running \(testapp\.jobs\.\w+ \(jid \w+\)\)", log
    )
    assert "requeued 1 job(s) unfinished at shutdown" in log
    # A new worker picks it up.
    w2 = worker()
    wait_until(lambda: runs(r, prefix).get("long") == 2, 10, message="run by the new worker")
    w2.kill()


def test_int_stops_like_term(worker, r, prefix):
    tj.count_then_sleep.enqueue(10, "long")
    w = worker(settings={"SHUTDOWN_TIMEOUT": 1})
    wait_until(lambda: runs(r, prefix).get("long") == 1, 10, message="the job started")
    w.signal(signal.SIGINT)
    assert w.wait(10) == 0
    assert r.llen(f"{prefix}:queue:default") == 1
    assert "SIGINT received: stopping" in w.log()


def test_second_term_exits_at_once_after_requeue(worker, r, prefix):
    # Within a second, the same TERM delivered twice (a process group or cgroup-wide
    # kill plus the supervisor's forward) is not a second request. The duplicate must
    # reach the worker after its handler ran for the first (two signals sent back to back
    # may be merged before Python sees them, proving nothing) and within the window: on
    # a machine too busy for that, the attempt is made again with a new worker.
    for _attempt in range(3):
        tj.count_then_sleep.enqueue(30, "long")
        w = worker(settings={"SHUTDOWN_TIMEOUT": 60})
        wait_until(lambda: runs(r, prefix).get("long", 0) >= 1, 10, message="the job started")
        w.signal(signal.SIGTERM)
        sent = time.monotonic()
        w.wait_for_log("SIGTERM received: stopping")
        w.signal(signal.SIGTERM)
        if time.monotonic() - sent < DUPLICATE_SIGNAL_WINDOW / 2:
            break
        w.kill()  # and its job forgotten, so no recovery brings it back
        for key in [f"{prefix}:queue:default", f"{prefix}:test:runs"]:
            r.delete(key)
        for key in r.scan_iter(f"{prefix}:inprogress*"):
            r.delete(key)
    else:
        raise AssertionError("could not deliver two TERMs within the duplicate window")
    # Past the window, measured from the first TERM (the window is the design's).
    time.sleep(max(0.0, sent + DUPLICATE_SIGNAL_WINDOW + 0.5 - time.monotonic()))
    assert w.proc.poll() is None, "still waiting for the job (SHUTDOWN_TIMEOUT=60)"
    started = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(30) == 0
    # At once: far from the 60 s the first TERM would have waited.
    assert time.monotonic() - started < 20
    assert r.llen(f"{prefix}:queue:default") == 1
    assert "requeued 1 job(s) unfinished at shutdown" in w.log()
    # Said as what it is, naming the job (not the thread) left running.
    assert re.search(
        r"second TERM: 1 job\(s\) still running \(testapp\.jobs\.count_then_sleep \(jid", w.log()
    )


def test_finished_jobs_are_not_requeued_at_term(worker, r, prefix):
    """Only unfinished jobs go back: a clean TERM with jobs finishing during the wait
    leaves nothing behind and runs nothing twice."""
    tj.tracked.enqueue_many([(0.3 * i, f"j{i}") for i in range(5)])
    w = worker(settings={"SHUTDOWN_TIMEOUT": 5})
    wait_until(
        lambda: all(r.hexists(f"{prefix}:test:runs", f"j{i}:start") for i in range(5)),
        10,
        message="all five running",
    )
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    assert runs(r, prefix) == {f"j{i}:{at}": 1 for i in range(5) for at in ("start", "end")}
    assert r.llen(f"{prefix}:queue:default") == 0
    assert not r.keys(f"{prefix}:inprogress:*")
    assert "requeued" not in w.log()


def test_tstp_quiets(worker, r, prefix):
    w = worker()
    (ident,) = wait_until(lambda: r.smembers(f"{prefix}:processes"), 5, message="registered")
    w.signal(signal.SIGTSTP)
    w.wait_for_log("quiet: no new jobs will be fetched")
    wait_until(
        lambda: r.hget(f"{prefix}:process:{ident}", "quiet") == "true", 5, message="quiet=true"
    )
    tj.record.enqueue_many([(f"q{i}",) for i in range(3)])
    time.sleep(1.0)
    assert r.llen(f"{prefix}:queue:default") == 3, "a quiet worker fetched"
    assert not runs(r, prefix)
    # Still alive and beating while quiet.
    assert r.exists(f"{prefix}:process:{ident}")
    assert w.proc.poll() is None
    assert w.stop() == 0
    assert r.llen(f"{prefix}:queue:default") == 3


def test_ttin_logs_every_threads_stack(worker, r, prefix):
    tj.count_then_sleep.enqueue(3, "busy")
    w = worker(settings={"CONCURRENCY": 2})
    wait_until(lambda: r.hexists(f"{prefix}:test:runs", "busy"), 5, message="the job running")
    w.signal(signal.SIGTTIN)
    # One log line per thread, in no fixed order: wait for each (a busy machine may
    # show the log between two of them).
    for name in ("MainThread", "processor-0", "processor-1", "feeder", "heartbeat", "chores"):
        w.wait_for_log(rf"thread {name} \(\d+\):")
    log = w.log()
    # The busy thread's stack shows the job.
    assert re.search(r"in count_then_sleep\n\s+time\.sleep\(seconds\)", log)
    assert w.proc.poll() is None
    assert w.stop() == 0


def test_processes_two_children_run_jobs_and_term_stops_both(worker, r, prefix):
    w = worker(args=["--processes", "2"], wait=False)
    w.wait_for_log(r"cogworker \S+ started", count=2, timeout=30)
    idents = wait_until(
        lambda: (m := r.smembers(f"{prefix}:processes")) and len(m) == 2 and m,
        10,
        message="two processes registered",
    )
    pids = {json.loads(r.hget(f"{prefix}:process:{i}", "info"))["pid"] for i in idents}
    assert len(pids) == 2 and w.pid not in pids
    # Both take jobs: slow ones, more than one process's threads can hold.
    tj.slow.enqueue_many([(1.0, f"p{i}") for i in range(10)])
    # Each holds five (its threads' worth) on its own in-progress list, and says so.
    wait_until(
        lambda: [r.llen(f"{prefix}:inprogress:{i}") for i in idents] == [5, 5],
        10,
        message="five jobs taken by each process",
    )
    wait_until(
        lambda: all(r.hget(f"{prefix}:process:{i}", "busy") == "5" for i in idents),
        10,
        message="both processes busy",
    )
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 10, 15, message="10 runs")
    assert set(runs(r, prefix).values()) == {1}
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0
    for pid in pids:
        assert not _alive(pid), f"child {pid} still running"
    assert r.scard(f"{prefix}:processes") == 0
    assert len(re.findall(r"cogworker \S+ stopped", w.log())) == 2


def test_processes_replaces_a_child_that_dies(worker, r, prefix):
    """A busy child SIGKILLed under --processes: the supervisor starts a replacement, the
    child's jobs are recovered from its list and run again, the other child's are not."""
    w = worker(args=["--processes", "2"], settings={"CONCURRENCY": 2}, wait=False)
    w.wait_for_log(r"cogworker \S+ started", count=2, timeout=30)
    tokens = [f"busy{i}" for i in range(4)]
    tj.tracked.enqueue_many([(4, t) for t in tokens])
    wait_until(
        lambda: all(runs(r, prefix).get(f"{t}:start") == 1 for t in tokens),
        15,
        message="four jobs started, two per child",
    )
    idents = r.smembers(f"{prefix}:processes")
    held = {i: r.lrange(f"{prefix}:inprogress:{i}", 0, -1) for i in idents}
    victim_ident = next(i for i, jobs in held.items() if len(jobs) == 2)
    victim_tokens = sorted(json.loads(x)["args"][1] for x in held[victim_ident])
    victim = json.loads(r.hget(f"{prefix}:process:{victim_ident}", "info"))["pid"]
    os.kill(victim, signal.SIGKILL)
    w.wait_for_log(rf"worker process {victim} exited with -9; starting a replacement")
    w.wait_for_log(r"cogworker \S+ started", count=3, timeout=30)
    w.wait_for_log(rf"recovered 2 job\(s\) from dead process {re.escape(victim_ident)}", 20)
    wait_until(
        lambda: all(runs(r, prefix).get(f"{t}:end") == 1 for t in tokens),
        20,
        message="every job finished",
    )
    c = runs(r, prefix)
    assert {t: c[f"{t}:start"] for t in tokens} == {
        t: 2 if t in victim_tokens else 1 for t in tokens
    }, c
    tj.record.enqueue_many([(f"r{i}",) for i in range(20)])
    wait_until(
        lambda: all(runs(r, prefix).get(f"r{i}") == 1 for i in range(20)),
        10,
        message="jobs still run",
    )
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0
    assert not r.exists(f"{prefix}:inprogress:{victim_ident}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): it is reaped by its parent; check its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_quiet_and_stop_from_the_signal_channel(worker, r, prefix):
    """The admin's Quiet and Stop: published on P:signal:<identity>."""
    w = worker()
    (ident,) = wait_until(lambda: r.smembers(f"{prefix}:processes"), 5, message="registered")
    channel = f"{prefix}:signal:{ident}"
    wait_until(lambda: r.publish(channel, "hello") == 1, 5, message="the subscriber")
    w.wait_for_log(r"ignoring unknown signal 'hello'")
    r.publish(channel, "quiet")
    wait_until(
        lambda: r.hget(f"{prefix}:process:{ident}", "quiet") == "true", 5, message="quiet=true"
    )
    assert "quiet requested from the admin" in w.log()
    r.publish(channel, "stop")
    assert w.wait(15) == 0
    assert "stop requested from the admin: stopping (waiting up to" in w.log()
    assert "SIGTERM received" not in w.log()  # no signal came: the admin asked
    assert r.scard(f"{prefix}:processes") == 0


def test_signal_subscriber_reconnects_after_its_connection_is_killed(
    worker, redis_server, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    client = server.client()
    w = worker(redis_url=server.url)
    (ident,) = wait_until(lambda: client.smembers(f"{prefix}:processes"), 5, message="up")
    channel = f"{prefix}:signal:{ident}"
    wait_until(lambda: client.publish(channel, "ping") == 1, 5, message="the subscriber")
    assert client.client_kill_filter(_type="pubsub") >= 1
    w.wait_for_log(r"Signal subscriber: Redis unavailable")
    w.wait_for_log(r"Signal subscriber: Redis recovered")
    wait_until(lambda: client.publish(channel, "stop") == 1, 5, message="resubscribed")
    assert w.wait(15) == 0


def test_group_wide_term_to_processes_still_waits_for_jobs(worker, r, prefix):
    """systemd's default KillMode (and Ctrl-C in a terminal) signals every process: each
    child gets TERM directly and again from the supervisor. That is one stop, not two:
    running jobs still get their shutdown timeout."""
    tj.count_then_sleep.enqueue_many([(2.0, "g0"), (2.0, "g1")])
    w = worker(args=["--processes", "2"], settings={"SHUTDOWN_TIMEOUT": 10}, wait=False)
    w.wait_for_log(r"cogworker \S+ started", count=2, timeout=30)
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 2, 10, message="both running")
    children = w.children()
    assert len(children) == 2
    for pid in [w.pid, *children]:  # as a cgroup-wide kill would (not killpg: that is us)
        os.kill(pid, signal.SIGTERM)
    assert w.wait(20) == 0
    assert runs(r, prefix) == {"g0": 1, "g1": 1}
    assert r.llen(f"{prefix}:queue:default") == 0
    assert "requeued" not in w.log()


def test_processes_children_stop_when_their_supervisor_is_killed(worker, r, prefix):
    """The supervisor SIGKILLed (the OOM killer, a kill -9 of the main pid): each child
    notices within a second, stops as on TERM (its running job requeued after the
    shutdown timeout) and exits, instead of running on unsupervised."""
    tj.count_then_sleep.enqueue(30, "long")
    settings = {"CONCURRENCY": 1, "SHUTDOWN_TIMEOUT": 1}
    w = worker(args=["--processes", "2"], settings=settings, wait=False)
    w.wait_for_log(r"cogworker \S+ started", count=2, timeout=30)
    wait_until(lambda: runs(r, prefix).get("long") == 1, 10, message="the long job running")
    children = w.children()
    assert len(children) == 2
    w.kill()  # the supervisor only

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A zombie until init reaps it: gone as far as running goes.
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"

    wait_until(lambda: all(gone(p) for p in children), 20, message="both children stopped")
    log = w.log()
    assert log.count("the supervisor (pid") == 2, log
    assert "requeued 1 job(s) unfinished at shutdown" in log, log
    (raw,) = r.lrange(f"{prefix}:queue:default", 0, -1)
    assert "count_then_sleep" in raw
    assert not r.keys(f"{prefix}:inprogress:*")


# The admin's Quiet and Stop (api.ProcessSet through pub/sub) end the process as TSTP and
# TERM do; also on a Redis Cluster, with one hash tag and with a home per queue, as every
# test of api.ProcessSet (tests/api/test_api_processes.py).


@pytest.mark.cluster
@pytest.mark.spread
def test_live_worker_busy_quiet_and_stop(worker, r):
    tj.slow.enqueue(30, "long")
    w = worker(settings={"SHUTDOWN_TIMEOUT": 1})  # the stop below needn't wait out the job
    ps = ProcessSet()
    proc = wait_until(lambda: ps.list() and ps.list()[0], 15, message="process listed")
    assert proc.pid == w.pid and proc.concurrency == 5 and proc.queues == ["default:1"]
    assert proc.started_at is not None and proc.rss_kb
    busy = wait_until(lambda: Workers().list(), 15, message="busy job listed")
    assert busy[0].record.func == "testapp.jobs.slow" and busy[0].record.args == [30, "long"]
    assert busy[0].identity == proc.identity and busy[0].started_at is not None

    assert ps.quiet(proc.identity) == 1
    wait_until(lambda: ps.get(proc.identity).quiet, 10, message="quiet shown")
    w.wait_for_log("quiet requested from the admin")

    assert ps.stop(proc.identity) == 1
    w.wait_for_log("stop requested from the admin")
    assert w.wait(30) == 0
    assert ps.list() == []
    # The unfinished job went back to its queue (graceful stop loses nothing).
    assert r.llen(keys.queue("default")) == 1
    assert ps.quiet(proc.identity) == 0  # nobody listens any more


# The threads of a worker process are the ones docs/workers.md's table lists: a real
# ``manage.py cogworker -c 10`` at the default settings, asked with TTIN.


DOC = ROOT / "docs" / "workers.md"


def documented() -> dict[str, str]:
    """Thread name (its pattern, ``N`` and ``<...>`` as placeholders) -> when it runs."""
    lines = DOC.read_text().splitlines()
    start = lines.index("| thread | runs | does |") + 2
    rows = {}
    for line in lines[start:]:
        m = re.match(r"^\| `([^`]+)` \| ([^|]+) \|", line)
        if not m:
            break
        rows[m.group(1)] = m.group(2).strip()
    return rows


def pattern(name: str) -> re.Pattern[str]:
    body = re.escape(name).replace("N", r"\d+")
    body = re.sub(r"<[^>]+>", ".+", body.replace(r"\<", "<").replace(r"\>", ">"))
    return re.compile(f"^{body}$")


def test_the_threads_are_the_documented_ones_and_no_more(worker):
    rows = documented()
    assert "processor-N" in rows and "chores" in rows, rows
    # The test project registers async jobs (an event loop) and limiters (their waker, a
    # chore): the defaults otherwise, at -c 10.
    w = worker(args=["-c", "10"], settings={"CONCURRENCY": 10})
    w.signal(signal.SIGTTIN)
    w.wait_for_log(r"thread MainThread \(", 15)
    listed = re.findall(r"thread (\S+) \(\d+\):", w.log())
    unknown = [n for n in listed if not any(pattern(p).match(n) for p in rows)]
    assert unknown == [], (unknown, listed)
    # Every row but those on demand and the metrics server's (no --metrics-port here).
    always = [p for p, when in rows.items() if not when.startswith(("on demand", "with `--"))]
    for name in always:
        assert any(pattern(name).match(n) for n in listed), (name, listed)
    on_demand = [p for p, when in rows.items() if when.startswith("on demand")]
    permanent = [n for n in listed if not any(pattern(p).match(n) for p in on_demand)]
    assert len(permanent) == 10 + 6, permanent  # CONCURRENCY + 6 (docs/workers.md)
    assert w.stop() == 0
