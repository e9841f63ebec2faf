"""Redis faults under running workers (private redis-server each): killed and restarted,
CLIENT PAUSE, DEBUG SLEEP, SCRIPT FLUSH. The workers carry on afterwards, no job that was
acknowledged runs again, none that was in Redis after the fault is lost, and the log holds
at most one outage line and one "recovered" line per component."""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import pytest
from testapp import jobs as tj

from cogworker_django.store import keys

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
