"""The lifeline at the DEFAULT timings, live workers that stall: a worker stopped
(SIGSTOP) for 25 s or starved of CPU, or stalled across a Redis restart, is never taken
for dead; one stopped past the threshold is fenced and carries on under a new identity
(worker/recovery.py, worker/retired.py, docs/reliability.md). Apart from
test_lifeline.py so that the two run side by side (each file runs on one test process)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from testapp import jobs as tj

from cogworker_django.store import keys, naming
from cogworker_django.worker.recovery import LATE_BEATS

from ..helpers import wait_until
from .test_lifeline import DEFAULTS, TAKEN_FOR_DEAD, holding, identity_of, runs, start_pair


@pytest.mark.cluster
def test_a_worker_stopped_25_seconds_is_not_taken_for_dead(worker, prefix, r):

    x, x_ident = start_pair(worker)
    tokens = [f"s{i}" for i in range(4)]
    tj.tracked.enqueue_many([(35, t) for t in tokens])
    holding(r, x_ident, 4)
    rescuer = worker(settings=DEFAULTS)
    x.signal(signal.SIGSTOP)
    try:
        time.sleep(25)
        # X's beat is five intervals late: only its connections, still open, say it lives.
        stamp = r.hget(keys.last_beat(), x_ident)
        assert stamp is not None, "X was taken for dead:\n" + rescuer.log()[-3000:]
        assert time.time() - float(stamp) >= 20
    finally:
        x.signal(signal.SIGCONT)
    wait_until(
        lambda: all(runs(r, prefix).get(f"{t}:end") == 1 for t in tokens),
        40,
        message="X finished its jobs",
    )
    assert not re.search(TAKEN_FOR_DEAD, rescuer.log()), rescuer.log()[-3000:]
    assert runs(r, prefix) == {
        **{f"{t}:start": 1 for t in tokens},
        **{f"{t}:end": 1 for t in tokens},
    }
    assert x.stop() == 0
    assert rescuer.stop() == 0


def test_a_worker_stalled_past_the_threshold_is_fenced(worker, prefix, r):
    """X (shortened ORPHAN_THRESHOLD, the one case that may) is stopped longer than the
    threshold while it runs three jobs; R recovers them and runs them again, then goes
    quiet. Two jobs are pushed while X is stopped: when X continues, its free threads may
    take them before its next beat (onto its old identity's list) or after (onto its new
    one's). That beat finds its stamp gone: an ERROR line, its three runs settle nothing
    (the failing one is filed in dead once, by its copy), and X carries on under a new
    identity; the old one is forgotten once nothing is left on its list. Each recovered
    job ran once more, no more; every other job once; nothing lost."""
    fast = {"CONCURRENCY": 5, "CLIENT_NAMES": True}
    x = worker(settings=fast)
    x_ident = identity_of(x)
    tj.tracked.enqueue_many([(12, "f0"), (12, "f1")])
    tj.tracked_then_fail.enqueue(12, "f2")
    holding(r, x_ident, 3)
    rescuer = worker(settings=fast)
    x.signal(signal.SIGSTOP)
    try:
        rescuer.wait_for_log(rf"from dead process {re.escape(x_ident)}", 20)
        wait_until(
            lambda: all(runs(r, prefix).get(f"f{i}:start") == 2 for i in range(3)),
            10,
            message="the copies started",
        )
        rescuer.signal(signal.SIGTSTP)  # quiet: the jobs pushed next are X's to take
        rescuer.wait_for_log("quiet", 10)
        tj.tracked.enqueue_many([(3, "m0"), (3, "m1")])
    finally:
        x.signal(signal.SIGCONT)
    x.wait_for_log(rf"this process \({re.escape(x_ident)}\) was taken for dead", 10)
    assert "3 running job(s) were recovered" in x.log(), x.log()[-3000:]
    new_ident = re.search(r"carrying on as (\S+)", x.log()).group(1)
    assert new_ident != x_ident
    wait_until(
        lambda: all(runs(r, prefix).get(f"f{i}:end") == 2 for i in range(3)),
        30,
        message="both runs of each ended",
    )
    x.wait_for_log("left to its recovered copy", 10, count=3)
    wait_until(
        lambda: all(runs(r, prefix).get(f"m{i}:end") == 1 for i in range(2)),
        15,
        message="the jobs pushed during the stop ran",
    )
    # The old identity is forgotten: nothing left on its list; the new one beats, its
    # presence naming the connections the process kept.
    wait_until(
        lambda: (
            x_ident not in r.smembers(keys.inprogress_ids())
            and not r.hexists(keys.last_beat(), x_ident)
            and not r.exists(keys.process(x_ident))
        ),
        15,
        message="the old identity forgotten",
    )
    wait_until(lambda: new_ident in r.smembers(keys.processes()), 10, message="new presence")
    assert x_ident not in r.smembers(keys.processes())
    assert r.hget(keys.process(new_ident), "client") == naming.client_name(x_ident)
    # X carries on: a new job runs once (on X: R is quiet).
    tj.tracked.enqueue(0.1, "after")
    wait_until(lambda: runs(r, prefix).get("after:end") == 1, 15, message="a new job ran")
    time.sleep(2)
    counted = runs(r, prefix)
    assert counted == {
        **{f"f{i}:start": 2 for i in range(3)},
        **{f"f{i}:end": 2 for i in range(3)},
        **{f"m{i}:start": 1 for i in range(2)},
        **{f"m{i}:end": 1 for i in range(2)},
        "after:start": 1,
        "after:end": 1,
    }
    assert r.zcard(keys.dead(keys.home_of("default"))) == 1  # the copy's filing only
    assert r.zcard(keys.retry(keys.home_of("default"))) == 0
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(keys.inprogress(x_ident, keys.home_of("default"))) == 0
    assert x.stop() == 0
    assert rescuer.stop() == 0
    assert r.llen(keys.inprogress(new_ident, keys.home_of("default"))) == 0


def test_a_worker_starved_across_a_redis_restart_is_not_taken_for_dead(
    worker, redis_server, configure
):
    """The case the time guards are for: X is stopped, Redis (AOF) goes down for longer
    than two beats and comes back; X's connections died with the old server and, stopped,
    it can't open new ones, and its stamp comes back late. The rescuer, back at once, must
    still give X two intervals from the server's return (and its own first beat after it)
    to beat. X continues 4 s after the restart: nobody taken for dead, each job once."""
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    r = server.client()
    x = worker(settings=DEFAULTS, redis_url=server.url)
    x_ident = identity_of(x)
    tokens = [f"z{i}" for i in range(4)]
    tj.tracked.enqueue_many([(35, t) for t in tokens])
    holding(r, x_ident, 4)
    rescuer = worker(settings=DEFAULTS, redis_url=server.url)
    x.signal(signal.SIGSTOP)
    try:
        server.stop()
        time.sleep(12)
        server.start()
        r = server.client()
        wait_until(
            lambda: (
                naming.client_name(identity_of(rescuer)) in {c["name"] for c in r.client_list()}
            ),
            10,
            message="the rescuer is back",
        )
        time.sleep(4)
    finally:
        x.signal(signal.SIGCONT)
    prefix = x.prefix
    wait_until(
        lambda: all(runs(r, prefix).get(f"{t}:end") == 1 for t in tokens),
        45,
        message="X finished its jobs",
    )
    assert not re.search(TAKEN_FOR_DEAD, rescuer.log()), rescuer.log()[-3000:]
    assert runs(r, prefix) == {
        **{f"{t}:start": 1 for t in tokens},
        **{f"{t}:end": 1 for t in tokens},
    }
    assert x.stop() == 0
    assert rescuer.stop() == 0


def test_a_run_that_ends_during_the_freeze_waits_for_the_fence(worker, prefix, r):
    """X is frozen past the (shortened) threshold while a failing job's run is due to end
    during the freeze: when X continues, that run's thread is ready before the heartbeat,
    yet it settles nothing (it waits for the heartbeat's look, which fences it): the
    job is filed in dead once, by its copy."""
    fast = {"CONCURRENCY": 5, "CLIENT_NAMES": True}
    x = worker(settings=fast)
    x_ident = identity_of(x)
    tj.tracked_then_fail.enqueue(2, "e0")
    holding(r, x_ident, 1)
    rescuer = worker(settings=fast)
    x.signal(signal.SIGSTOP)
    try:
        rescuer.wait_for_log(rf"from dead process {re.escape(x_ident)}", 20)
        wait_until(lambda: runs(r, prefix).get("e0:end") == 1, 15, message="the copy ended")
    finally:
        x.signal(signal.SIGCONT)
    x.wait_for_log("left to its recovered copy", 10)
    time.sleep(2)
    assert runs(r, prefix) == {"e0:start": 2, "e0:end": 2}
    assert r.zcard(keys.dead(keys.home_of("default"))) == 1, x.log()[-3000:]
    assert x.stop() == 0
    assert rescuer.stop() == 0


# A CPU-starved worker ------------------------------------------------------------------

# Busy processes on the starved worker's CPU, each in a session of its own: where the
# kernel groups threads by session (autogroup), each is a group of its own, of the
# normal weight, against the worker's niced one.


SPINNERS = 4


SPIN = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


class Starvation:
    """Starve a worker process of CPU for real: every thread of it pinned to one CPU and
    at the lowest priority (nice 19; its session's autogroup too where the kernel has
    one), beside SPINNERS processes spinning on that CPU at the normal priority. Threads
    it starts meanwhile inherit that from the thread that starts them, and each pass
    (every 0.5 s) catches any other. ``end()`` kills the spinners and gives the worker
    its CPUs and priority back (a priority raised back needs the privilege to: without
    it the worker stays at nice 19, on an otherwise quiet machine)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu = max(os.sched_getaffinity(0))
        self.spinners: list[subprocess.Popen] = []
        self._done = threading.Event()
        self._pass = threading.Thread(target=self._hold, name="starve", daemon=True)

    def _threads(self) -> list[int]:
        try:
            return [int(t) for t in os.listdir(f"/proc/{self.pid}/task")]
        except OSError:
            return []  # exited

    def _set(self, cpus: set[int], nice: int) -> None:
        for tid in self._threads():
            try:
                os.sched_setaffinity(tid, cpus)
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            except OSError:
                pass  # the thread ended, or (raising the priority back) no privilege
        try:
            with open(f"/proc/{self.pid}/autogroup", "w") as f:
                f.write(str(nice))
        except OSError:
            pass  # no autogroup here: the threads' own nice is what counts

    def _hold(self) -> None:
        while not self._done.wait(0.5):
            self._set({self.cpu}, 19)

    def begin(self) -> None:
        self._set({self.cpu}, 19)
        self._pass.start()
        for _ in range(SPINNERS):
            self.spinners.append(
                subprocess.Popen(
                    [sys.executable, "-c", SPIN, str(self.cpu)], start_new_session=True
                )
            )

    def end(self) -> None:
        self._done.set()
        for p in self.spinners:
            p.kill()
            p.wait(10)
        if self._pass.is_alive():
            self._pass.join(5)
        self._set(set(os.sched_getaffinity(0)), 0)


def client_list_calls(r) -> int:
    """CLIENT LIST commands the server has run: a lifeline pass reads it only once some
    process is late (and named), to look for that process's connections."""
    stats = r.info("commandstats")
    return int(stats.get("cmdstat_client|list", {}).get("calls", 0))


def test_a_cpu_starved_worker_is_not_taken_for_dead(worker, redis_server, configure):
    """X runs four CPU-bound jobs at the defaults (lifeline on) beside two workers that
    read its queue. X is then starved of CPU (its threads pinned to one CPU at nice 19,
    four processes spinning there) for 25-40 s: its process gets a sliver of CPU, which
    its own jobs mostly take, so its beats run more than two intervals late while its
    presence still names its connections, and the watchers' lifeline looks for them in
    CLIENT LIST (counted on this private server: the proof that X was judged). Its
    connections are open, so nobody takes it for dead: each job starts and ends once,
    and X beats again once fed."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    r = server.client()
    x = worker(settings=DEFAULTS, redis_url=server.url)
    x_ident = identity_of(x)
    tokens = [f"c{i}" for i in range(4)]
    tj.tracked_busy.enqueue_many([(50, t) for t in tokens])
    holding(r, x_ident, 4)
    watchers = [worker(settings=DEFAULTS, redis_url=server.url) for _ in range(2)]
    interval = DEFAULTS["HEARTBEAT_INTERVAL"]
    late_enough = LATE_BEATS * interval + 1  # stamps are whole seconds, floored
    judged_before = client_list_calls(r)
    starvation = Starvation(x.pid)
    starvation.begin()
    began = time.monotonic()
    late_named = 0.0  # X's lateness while its presence named its connections
    try:
        while time.monotonic() - began < 40:
            stamp = r.hget(keys.last_beat(), x_ident)
            assert stamp is not None, "X was taken for dead:\n" + "\n".join(
                w.log()[-1500:] for w in watchers
            )
            if r.hget(keys.process(x_ident), "client") == naming.client_name(x_ident):
                late_named = max(late_named, time.time() - float(stamp))
            judged = client_list_calls(r) - judged_before
            if time.monotonic() - began >= 25 and judged >= 2:
                break
            time.sleep(0.25)
    finally:
        starvation.end()
    starved = time.monotonic() - began
    judged = client_list_calls(r) - judged_before
    # The starvation was real: X's beat ran late past the lifeline's two intervals while
    # it was named, and the watchers looked for its connections.
    assert late_named >= late_enough, (late_named, starved)
    assert judged >= 1, (late_named, starved, judged)
    wait_until(
        lambda: all(runs(r, x.prefix).get(f"{t}:end") == 1 for t in tokens),
        60,
        message="X finished its jobs",
    )
    wait_until(lambda: r.exists(keys.process(x_ident)), 2 * interval, message="X beats again")
    for w in (*watchers, x):
        assert not re.search(TAKEN_FOR_DEAD, w.log()), w.log()[-3000:]
    assert "was taken for dead" not in x.log(), x.log()[-3000:]
    assert runs(r, x.prefix) == {
        **{f"{t}:start": 1 for t in tokens},
        **{f"{t}:end": 1 for t in tokens},
    }
    print(f"starved {starved:.0f}s; beat {late_named:.1f}s late; CLIENT LIST read {judged} times")
    assert x.stop() == 0
    for w in watchers:
        assert w.stop() == 0
