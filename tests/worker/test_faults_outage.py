"""Redis faults under running worker processes (private redis-server each): killed and
restarted, CLIENT PAUSE, DEBUG SLEEP, SCRIPT FLUSH. The workers carry on afterwards, no
job that was acknowledged runs again, none that was in Redis after the fault is lost, and
the log holds at most one outage line and one "recovered" line per component. Then the
same faults as features meet them: Redis stopped for 10 s mid-run; unique locks whose
release waits for Redis (a beat after it returns, at the shutdown, or lost with the
process and lapsing at the TTL); batch callbacks exactly once through kills of workers
and a Redis restart."""

from __future__ import annotations

import json
import random
import re
import signal
import threading
import time
from collections import defaultdict

import pytest
from testapp import jobs as tj

from cogworker_django import Batch, api
from cogworker_django.store import keys

from ..core.unique_helpers import lock_of, stop_keeping_data
from ..helpers import FAST_SETTINGS, wait_until

UNAVAILABLE = re.compile(r"\] cogworker_django: (.+?): Redis unavailable")
RECOVERED = re.compile(r"\] cogworker_django: (.+?): Redis recovered")


def outage_lines(log: str) -> tuple[dict[str, int], dict[str, int]]:
    """Per component: how many outage lines, how many recovered lines."""
    down: dict[str, int] = {}
    up: dict[str, int] = {}
    for rx, counts in ((UNAVAILABLE, down), (RECOVERED, up)):
        for m in rx.finditer(log):
            # "Component: detail" lines count for their component
            component = m.group(1).split(": ")[0]
            counts[component] = counts.get(component, 0) + 1
    return down, up


def assert_one_outage_per_component(log: str, expect_outage: bool) -> None:
    down, up = outage_lines(log)
    assert all(n == 1 for n in down.values()), (down, log[-5000:])
    assert down == up, (down, up, log[-5000:])
    if expect_outage:
        assert {"Heartbeat", "Fetch", "Settle"} <= set(down), (down, log[-5000:])
    assert "Traceback" not in log, log[-5000:]


def _runs(r) -> dict[str, str]:
    return r.hgetall(f"{keys.prefix()}:test:runs")


@pytest.fixture
def private(redis_server, configure):
    server = redis_server()
    configure(REDIS_URL=server.url)
    return server


def test_redis_killed_and_restarted(redis_server, configure, worker):
    """Redis SIGKILLed under a busy worker and started again, persistent
    (``appendfsync always``: it keeps every write it acknowledged). Two jobs finish and
    one fails while it is down: once it is back their acks and the filing go through
    (the in-progress list empties), none of them runs again, nothing acknowledged before
    runs again, everything pushed after runs once; one outage and one recovery line per
    component."""
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    r = server.client()
    # a periodic entry firing every second keeps the ticker busy across the outage
    every_second = {"tick": {"cron": "* * * * * *", "job": "testapp.jobs.noop"}}
    w = worker(redis_url=server.url, periodic=every_second)
    before = [f"before{i}" for i in range(10)]
    tj.record.enqueue_many([(t,) for t in before])
    wait_until(lambda: len(_runs(r)) == 10, 10, message="jobs before the fault")
    in_flight = [tj.sleeper.enqueue(1.5) for _ in range(2)]
    failing = tj.sleep_then_fail.enqueue(1.5)
    timeline = f"{keys.prefix()}:test:timeline"
    wait_until(lambda: r.hlen(timeline) == 3, 5, message="in-flight jobs started")
    started = r.hgetall(timeline)  # one start stamp per run: a second run rewrites it
    (ident,) = r.smembers(keys.processes())
    inprogress = keys.inprogress(ident, keys.home_of("default"))
    assert r.llen(inprogress) == 3
    server.stop()
    # The sleepers finish (their acks fail) and the failing job fails (its filing in dead
    # fails) while Redis is away: both wait in the worker's record.
    w.wait_for_log(r"Settle: .*Redis unavailable", 5)
    w.wait_for_log(r"Fetch: .*Redis unavailable", 5)
    # The worker is held still while Redis comes back, so that nothing it does can
    # settle a job before the list is read.
    w.signal(signal.SIGSTOP)
    try:
        server.start()
        r = server.client()
        assert r.llen(inprogress) == 3  # the restart kept the list: the settling is the worker's
    finally:
        w.signal(signal.SIGCONT)
    w.wait_for_log(r"Heartbeat: Redis recovered", 10)
    wait_until(lambda: r.llen(inprogress) == 0, 10, message="the pending acks and filing")
    after = [f"after{i}" for i in range(10)]
    tj.record.enqueue_many([(t,) for t in after])
    tj.record.enqueue_in(0.5, "scheduled-after")
    everything = [*before, *after, "scheduled-after"]
    wait_until(lambda: len(_runs(r)) == len(everything), 15, message="jobs after the restart")
    # Past ORPHAN_THRESHOLD and a check: a recovered or reconciled copy would have run.
    time.sleep(FAST_SETTINGS["ORPHAN_THRESHOLD"] + 1)
    assert _runs(r) == {t: "1" for t in everything}
    assert r.hgetall(timeline) == started  # neither sleeper ran again, nor the failing job
    assert r.hlen(timeline) == len(in_flight) + 1
    # the failure was filed in dead once, after Redis was back
    (dead,) = r.zrange(keys.dead(keys.home_of("default")), 0, -1)
    assert failing in dead
    assert r.zcard(keys.retry(keys.home_of("default"))) == 0
    # Queued or in progress now: only the every-second tick's latest jobs, still coming.
    left = [*r.lrange(keys.queue("default"), 0, -1), *r.lrange(inprogress, 0, -1)]
    assert {json.loads(job)["func"] for job in left} <= {"testapp.jobs.noop"}, left
    assert w.proc.poll() is None
    assert w.stop() == 0
    assert "from dead process" not in w.log() and "lost fetch reply" not in w.log()
    assert_one_outage_per_component(w.log(), expect_outage=True)


def _pause(server):
    server.client().client_pause(5000)


def _sleep(server):
    c = server.client()
    c.execute_command("DEBUG", "SLEEP", "4")  # longer than the 3 s ORPHAN_THRESHOLD


def _script_flush(server):
    server.client().script_flush()


@pytest.mark.parametrize(
    "fault",
    [_pause, _sleep, _script_flush],
    ids=["client-pause-5s", "debug-sleep-4s", "script-flush"],
)
def test_workers_ride_out_a_stalled_or_flushed_redis(private, worker, fault):
    """Two workers, jobs running and queued across the fault: each runs exactly once
    (rule 13: a stall longer than ORPHAN_THRESHOLD makes nobody an orphan)."""
    server = private
    r = server.client()
    w1 = worker(redis_url=server.url, settings={"CONCURRENCY": 3})
    w2 = worker(redis_url=server.url, settings={"CONCURRENCY": 3})
    running = [f"running{i}" for i in range(4)]
    tj.count_then_sleep.enqueue_many([(2.0, t) for t in running])
    wait_until(lambda: len(_runs(r)) == 4, 10, message="long jobs started")
    queued = [f"queued{i}" for i in range(30)]
    tj.record.enqueue_many([(t,) for t in queued])
    stall = threading.Thread(target=fault, args=(server,))
    stall.start()
    time.sleep(0.2)
    after = [f"after{i}" for i in range(10)]
    tj.record.enqueue_many([(t,) for t in after])  # blocks while Redis is stalled
    stall.join()
    ended = time.monotonic()
    everything = [*running, *queued, *after]
    wait_until(lambda: len(_runs(r)) == len(everything), 20, message="every job ran")
    # A wrong recovery comes within a check of the stall's end (every beat stale then) or,
    # at the latest, a threshold after it: wait that long for one to show.
    time.sleep(max(0.0, ended + 3 + 1 - time.monotonic()))
    assert _runs(r) == {t: "1" for t in everything}
    for w in (w1, w2):
        assert w.proc.poll() is None
        log = w.log()
        assert "from dead process" not in log, log[-4000:]
        assert w.stop() == 0
        assert_one_outage_per_component(w.log(), expect_outage=False)
    assert r.llen(keys.queue("default")) == 0


# Redis stopped for 10 s in the middle of a run, then started again: the workers go on
# without a restart, no job is lost, and nobody is taken for an orphan (rule 13).
#
# The private server persists every write (``appendonly yes``, ``appendfsync always``), so
# stopping it (SIGKILL) and starting it again loses nothing it acknowledged: the test is
# about the workers, not about a Redis that forgets. (A server without persistence would
# lose the queues themselves; ``DEBUG SLEEP`` or ``CLIENT PAUSE`` would only delay
# commands, not refuse connections.)


def counts(client, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in client.hgetall(f"{prefix}:test:runs").items()}


def test_redis_stopped_for_10s_mid_run(worker, redis_server, configure, prefix):
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    client = server.client()
    # Six seconds of work on eight threads: on a loaded machine the test may notice the
    # first ten ends late, and jobs must still be running when Redis goes away.
    n = 240
    tokens = [f"o{i}" for i in range(n)]
    jids = dict(zip(tokens, tj.tracked.enqueue_many([(0.2, t) for t in tokens]), strict=True))
    settings = {"CONCURRENCY": 4, "ORPHAN_THRESHOLD": 3}
    workers = [worker(redis_url=server.url, settings=settings) for _ in range(2)]
    wait_until(
        lambda: sum(k.endswith(":end") for k in counts(client, prefix)) >= 10,
        10,
        message="the run under way",
    )
    server.stop()
    time.sleep(10)
    server.start()
    client = server.client()
    wait_until(
        lambda: all(counts(client, prefix).get(f"{t}:end", 0) >= 1 for t in tokens),
        60,
        message="every job finished",
    )
    c = counts(client, prefix)
    ends = [c[f"{t}:end"] for t in tokens]
    starts = [c.get(f"{t}:start", 0) for t in tokens]
    # A job cut by the outage fails (its own Redis writes fail), is filed in retry once
    # Redis is back, and runs again: it may start twice, but none runs to its end twice
    # (a job that ended has its ack retried, never a second run). One exception, the
    # job's own and not the worker's: an end written the instant Redis was SIGKILLed
    # (done and fsynced, its reply never sent) fails that run as any cut write does, so
    # it runs again and ends twice; such a first run is logged as failed, to retry.
    logs = "".join(w.log() for w in workers)
    twice = {t: e for t, e in zip(tokens, ends, strict=True) if e != 1}
    for token, e in twice.items():
        assert e == 2 and c[f"{token}:start"] == 2, twice
        assert re.search(
            rf"\(jid {jids[token]}\) failed: \w*(Connection|Timeout)\w*.*-> retry", logs
        ), (
            token,
            logs[-3000:],
        )
    # At most the writes in flight at the kill: one a thread.
    assert len(twice) <= 2 * settings["CONCURRENCY"], twice
    assert max(starts) <= 2, c
    assert sum(1 for s in starts if s == 2) >= 1, "no job was cut by the outage"
    assert client.zcard(f"{prefix}:dead") == 0
    assert client.zcard(f"{prefix}:retry") == 0
    assert client.llen(f"{prefix}:queue:default") == 0
    # Both processes alive and beating; nobody declared the other dead (rule 13).
    wait_until(lambda: client.scard(f"{prefix}:processes") == 2, 5, message="both beating")
    for w in workers:
        assert w.proc.poll() is None
        assert not re.search(r"recovered \d+ job\(s\) from dead process", w.log()), w.log()
    for w in workers:
        assert w.stop() == 0
    assert not client.keys(f"{prefix}:inprogress:*")


# Unique locks whose release fails while Redis is away: it goes through on the first
# heartbeat after Redis returns, or at the worker's shutdown hand-over; one lost with its
# process lapses at the lock's TTL.


# How long the sleeper runs in the tests that stop Redis once it has started: long
# enough for a loaded machine to stop Redis before it returns (its release must meet
# the outage), short enough to keep the tests quick.
RUN_SECONDS = 3.0


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


# Exactly-once batch callbacks under fault injection: batches over three worker processes
# while a chaos loop SIGKILLs workers (mid-run, mid-bookkeeping, wherever they are) and
# restarts Redis (with the append-only file fsynced on every write, so nothing
# acknowledged is lost). Every on_success and on_complete is pushed exactly once (one jid
# per batch and event, counted from the callbacks' own trace) and none runs before its
# batch has finished.
#
# Each kill lands on a worker that is running and has jobs taken (its in-progress list not
# empty, replacements waited for until they are), and the test shows what the kills hit:
# a survivor's log names each killed process it recovered jobs from, and members ran
# twice (their runs are counted).


BATCHES = 200


SIZE = 20


WORKERS = 3


# The member's own work: long enough that kills land in the middle of runs.
WORK_SECONDS = 0.02


def test_every_callback_fires_exactly_once_through_kills_and_a_redis_restart(
    redis_server, configure, worker, prefix
):
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    r = server.client()
    settings = {"CONCURRENCY": 4}
    procs = [worker(redis_url=server.url, settings=settings) for _ in range(WORKERS)]
    everyone = list(procs)  # with the killed ones: their logs too

    labels = [f"b{i}" for i in range(BATCHES)]
    bids = {}
    rng = random.Random(1234)
    kills = 0
    hit: dict[str, int] = {}  # identity killed -> jobs on its in-progress list then
    cut: set[str] = set()  # members on a killed worker's list ("label:i")
    started = time.monotonic()
    last_chaos = time.monotonic()

    def taken(w) -> int:
        """Jobs the worker has taken now (0 before it has started)."""
        found = re.search(r"started: identity=(\S+) ", w.log())
        return r.llen(keys.inprogress(found.group(1), keys.root())) if found else 0

    def chaos() -> None:
        nonlocal kills, last_chaos
        if time.monotonic() - last_chaos < 1.0:
            return
        last_chaos = time.monotonic()
        # A worker running with jobs taken: replacements still booting are waited for,
        # and a moment with none (the queue ran dry) is no moment for a kill.
        order = rng.sample(range(len(procs)), len(procs))
        try:
            i = wait_until(lambda: next((j + 1 for j in order if taken(procs[j])), 0), 10, 0.01) - 1
        except AssertionError:
            return
        victim = procs[i]
        ident = re.search(r"started: identity=(\S+) ", victim.log()).group(1)
        victim.kill()  # SIGKILL: no hand-over; its jobs wait for orphan recovery
        kills += 1
        listed = [json.loads(raw) for raw in r.lrange(keys.inprogress(ident, keys.root()), 0, -1)]
        hit[ident] = len(listed)
        cut.update(
            f"{job['args'][0]}:{job['args'][1]}"
            for job in listed
            if job["func"].endswith("wf_chaos_member")
        )
        procs[i] = worker(redis_url=server.url, settings=settings, wait=False)
        everyone.append(procs[i])

    for n, label in enumerate(labels):
        with Batch(
            description=label,
            on_success=tj.wf_chaos_callback.s(label, "success", SIZE),
            on_complete=tj.wf_chaos_callback.s(label, "complete", SIZE),
        ) as batch:
            tj.wf_chaos_member.enqueue_many([(label, i, WORK_SECONDS) for i in range(SIZE)])
        bids[label] = batch.bid
        if n % 20 == 0:
            chaos()

    def fired() -> int:
        return r.llen(f"{prefix}:test:chaos:callbacks")

    # Kill while the batches run, restart Redis once in the middle of it.
    restarted = False
    deadline = time.monotonic() + 30
    while fired() < 2 * BATCHES * 0.8 and time.monotonic() < deadline:
        chaos()
        if not restarted and fired() > BATCHES * 0.6:
            server.restart()  # SIGKILL of redis-server, then the same port, same AOF
            restarted = True
        time.sleep(0.1)
    if not restarted:
        server.restart()
        restarted = True

    def distinct() -> int:
        seen = {tuple(e.split("|")[:2]) for e in r.lrange(f"{prefix}:test:chaos:callbacks", 0, -1)}
        return len(seen)

    wait_until(lambda: distinct() == 2 * BATCHES, 90, 0.25, message="every callback")
    # Let anything still due run (a duplicate would show up now), then look.
    wait_until(
        lambda: (
            r.llen(keys.queue("default")) == 0
            and all(r.llen(k) == 0 for k in r.keys(f"{prefix}:inprogress:*"))
        ),
        60,
        0.25,
        message="queues and in-progress lists empty",
    )

    runs: dict[tuple[str, str], set[str]] = defaultdict(set)
    repeats = 0
    early = []
    for entry in r.lrange(f"{prefix}:test:chaos:callbacks", 0, -1):
        label, event, jid, done, size = entry.split("|")
        if jid in runs[(label, event)]:
            repeats += 1  # the same callback job delivered again after its worker died
        runs[(label, event)].add(jid)
        if int(done) != int(size):
            early.append((label, event, int(done), int(size), entry))
    batches = api.Batches()
    statuses = {label: batches.get(bid) for label, bid in bids.items()}
    # on_success waits for every member's success: it must see every member done.
    # on_complete comes once every member has succeeded or failed at least once (a member
    # whose own write met the Redis restart fails once, and is retried): it may see fewer
    # done, but never fewer than the members that had not failed.
    too_early = [
        entry
        for label, event, done, size, entry in early
        if event == "success"
        or statuses[label] is None
        or done + statuses[label].failed_jobs < size
    ]
    assert too_early == [], f"callbacks that ran before their batch finished: {too_early[:5]}"
    doubled = {k: v for k, v in runs.items() if len(v) != 1}
    assert doubled == {}, f"callbacks pushed more than once: {list(doubled.items())[:5]}"
    assert len(runs) == 2 * BATCHES

    for label in bids:
        status = statuses[label]
        assert status is not None and status.state == "succeeded", (label, status)
        assert status.total == SIZE and status.succeeded == SIZE
        assert {status.complete_jid} == runs[(label, "complete")]
        assert {status.success_jid} == runs[(label, "success")]
        assert r.scard(f"{prefix}:test:chaos:done:{label}") == SIZE
    assert restarted
    # The kills hit running work: each left jobs on its list (taken, not acked), and a
    # survivor recovered them, naming the dead process; members ran twice.
    hits = [ident for ident, n in hit.items() if n > 0]
    assert len(hits) >= 3, (kills, hit)
    logs = "\n".join(w.log() for w in everyone)
    recovered = set(re.findall(r"recovered \d+ job\(s\) from dead process (\S+)", logs))
    assert set(hits) <= recovered, (hit, recovered)
    member_runs = {k: int(v) for k, v in r.hgetall(f"{prefix}:test:chaos:runs").items()}
    assert len(member_runs) == BATCHES * SIZE
    twice = sorted(m for m in cut if member_runs[m] > 1)
    assert twice, f"no member on a killed worker's list ran twice: no kill cut a run {cut}"
    print(
        f"\n{BATCHES} batches of {SIZE}: {kills} SIGKILLs ({len(hits)} with jobs taken), "
        f"one Redis restart, {len(twice)} member(s) cut by a kill run again, "
        f"{repeats} callback re-deliveries after a kill, {len(early)} on_complete after a "
        f"member's failure, {time.monotonic() - started:.1f}s"
    )
