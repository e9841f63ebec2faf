"""The lifeline at the DEFAULT timings (HEARTBEAT_INTERVAL 5 s, ORPHAN_THRESHOLD 300 s):
a killed worker's jobs start again on another within 15 s, because its beat is late and
no connection named after it is left on Redis; a worker that stalls (SIGSTOP), a Redis
paused (CLIENT PAUSE) and a Redis restarted (every connection dropped at once) make
nobody look dead (worker/recovery.py, docs/reliability.md)."""

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

# The production timings: the test would prove nothing at shortened ones.
DEFAULTS = {
    "HEARTBEAT_INTERVAL": 5.0,
    "POLL_INTERVAL": 5.0,
    "ORPHAN_CHECK_INTERVAL": 60.0,
    "ORPHAN_THRESHOLD": 300,
    "KEYGUARD_INTERVAL": 60.0,
    "PERIODIC_TICK": 5.0,
    "FETCH_IDLE_MAX_INTERVAL": 1.0,
    "CONCURRENCY": 4,
    "CLIENT_NAMES": True,
}

TAKEN_FOR_DEAD = r"is gone \(no beat|from dead process"


def identity_of(w) -> str:
    w.wait_for_log(r"identity=\S+")
    return w.log().split("identity=")[1].split()[0]


def runs(r, prefix: str) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def holding(r, ident: str, count: int) -> None:
    wait_until(
        lambda: r.llen(keys.inprogress(ident, keys.home_of("default"))) == count,
        20,
        message=f"{ident} holds {count} jobs",
    )


def start_pair(worker, **kwargs):
    """X, holding 4 long jobs, then R, which reads the same queue (empty by then)."""
    x = worker(settings=DEFAULTS, **kwargs)
    x_ident = identity_of(x)
    return x, x_ident


@pytest.mark.cluster  # also on a Redis Cluster: CLIENT LIST read on every master
def test_a_killed_workers_jobs_start_again_within_15_seconds(worker, prefix, r):

    x, x_ident = start_pair(worker)
    tokens = [f"k{i}" for i in range(4)]
    tj.tracked.enqueue_many([(15, t) for t in tokens])
    holding(r, x_ident, 4)
    rescuer = worker(settings=DEFAULTS)
    # Its connections carry its name, and its presence says which (the lifeline's evidence).
    assert r.hget(keys.process(x_ident), "client") == naming.client_name(x_ident)
    assert naming.client_name(x_ident) in naming.named_clients(r)
    x.signal(signal.SIGKILL)
    x.wait()
    killed = time.monotonic()
    wait_until(
        lambda: all(runs(r, prefix).get(f"{t}:start") == 2 for t in tokens),
        15,
        0.05,
        message="the 4 jobs started again",
    )
    took = time.monotonic() - killed
    assert re.search(rf"process {re.escape(x_ident)} is gone", rescuer.log())
    wait_until(
        lambda: all(runs(r, prefix).get(f"{t}:end") == 1 for t in tokens),
        30,
        message="the second runs finished",
    )
    time.sleep(1)
    assert runs(r, prefix) == {
        **{f"{t}:start": 2 for t in tokens},
        **{f"{t}:end": 1 for t in tokens},
    }, took
    assert not r.exists(keys.process(x_ident))
    assert not r.hexists(keys.last_beat(), x_ident)
    print(f"restarted {took:.1f}s after SIGKILL")
    assert rescuer.stop() == 0


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


@pytest.mark.parametrize("mode", ["all", "write"])
def test_a_redis_paused_20_seconds_makes_nobody_dead(worker, redis_server, configure, mode):
    """CLIENT PAUSE (every command, or writes only: reads answer the checker while every
    beat waits) for 20 s: X's connections may time out and be opened again meanwhile, and
    every beat is late, yet nobody is taken for dead."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    r = server.client()
    x = worker(settings=DEFAULTS, redis_url=server.url)
    x_ident = identity_of(x)
    tokens = [f"p{i}" for i in range(4)]
    tj.tracked.enqueue_many([(40, t) for t in tokens])
    holding(r, x_ident, 4)
    rescuer = worker(settings=DEFAULTS, redis_url=server.url)
    time.sleep(6)  # the rescuer beat at least once more: its own clearance is clear
    r.client_pause(20000, all=mode == "all")
    time.sleep(20)
    wait_until(
        lambda: all(runs(r, prefix_of(x)).get(f"{t}:end") == 1 for t in tokens),
        45,
        message="X finished its jobs",
    )
    time.sleep(12)  # a lifeline pass or more after every beat was late
    prefix = prefix_of(x)
    assert not re.search(TAKEN_FOR_DEAD, rescuer.log()), rescuer.log()[-3000:]
    assert not re.search(TAKEN_FOR_DEAD, x.log()), x.log()[-3000:]
    assert runs(r, prefix) == {
        **{f"{t}:start": 1 for t in tokens},
        **{f"{t}:end": 1 for t in tokens},
    }
    assert x.stop() == 0
    assert rescuer.stop() == 0


def prefix_of(w) -> str:
    return w.prefix


def test_a_redis_restart_under_load_makes_nobody_dead(worker, redis_server, configure):
    """Redis (AOF, fsync always) killed and restarted while two workers run a stream of
    jobs: every connection drops at once and the stamps come back as they were, so every
    beat looks late and nobody has a connection; nobody is taken for dead, nothing lost."""
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    r = server.client()
    a = worker(settings=DEFAULTS, redis_url=server.url)
    b = worker(settings=DEFAULTS, redis_url=server.url)
    tokens = [f"l{i}" for i in range(200)]
    tj.tracked.enqueue_many([(0.3, t) for t in tokens])
    time.sleep(3)
    # Down for longer than two beats: every stamp is late when it comes back.
    server.stop()
    time.sleep(12)
    server.start()
    prefix = a.prefix
    wait_until(
        lambda: all(runs(r, prefix).get(f"{t}:end", 0) >= 1 for t in tokens),
        90,
        message="every job ran",
    )
    time.sleep(12)
    for w in (a, b):
        assert not re.search(TAKEN_FOR_DEAD, w.log()), w.log()[-3000:]
    counted = runs(r, prefix)
    # A job whose run straddled the outage may run again (its fetch or ack lost with the
    # connection): at most once more, and never through recovery (checked above).
    assert all(1 <= counted[f"{t}:start"] <= 2 for t in tokens)
    assert a.stop() == 0
    assert b.stop() == 0


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


def test_a_server_refusing_client_names_leaves_the_worker_unnamed(
    worker, redis_server, configure, prefix
):
    """A server (or proxy) that refuses CLIENT SETNAME: the worker says so once, names
    nothing (so nothing it opens fails to connect), announces no name, and runs jobs;
    the lifeline judges nobody by names there (the threshold rule remains)."""
    server = redis_server(extra=["--rename-command", "CLIENT", ""])
    configure(REDIS_URL=server.url)
    r = server.client()
    w = worker(settings=DEFAULTS, redis_url=server.url)
    ident = identity_of(w)
    assert "connections not named (CLIENT SETNAME" in w.log(), w.log()[-3000:]
    assert r.hget(keys.process(ident), "client") == ""
    tj.tracked.enqueue(0.1, "one")
    wait_until(lambda: runs(r, prefix).get("one:end") == 1, 15, message="a job ran")
    assert w.stop() == 0


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


def test_a_worker_killed_just_before_a_redis_restart_is_found_after_it(
    worker, redis_server, configure
):
    """X is SIGKILLed just after a beat, and Redis (AOF) goes down 8 s later for 4 s: the
    lifeline counts lateness from the server's start (a restart drops every connection),
    so X can be judged only 10 s after Redis is back, by when X's presence (four beats
    from its last) has lapsed. The rescuer looks for the name X's presence announced when
    it first saw X: its jobs start again within seconds of that, not ORPHAN_THRESHOLD
    (300 s) later."""
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    r = server.client()
    x = worker(settings=DEFAULTS, redis_url=server.url)
    x_ident = identity_of(x)
    tokens = [f"r{i}" for i in range(4)]
    tj.tracked.enqueue_many([(15, t) for t in tokens])
    holding(r, x_ident, 4)
    rescuer = worker(settings=DEFAULTS, redis_url=server.url)
    interval = DEFAULTS["HEARTBEAT_INTERVAL"]
    # Just after a beat of X: its presence lapses about four intervals after the kill.
    ttl = r.pttl(keys.process(x_ident))
    wait_until(lambda: r.pttl(keys.process(x_ident)) > ttl, 2 * interval, 0.02)
    x.signal(signal.SIGKILL)
    x.wait()
    lapses = time.monotonic() + r.pttl(keys.process(x_ident)) / 1000
    time.sleep(8)
    server.stop()
    time.sleep(4)
    server.start()
    back = time.monotonic()
    r = server.client()
    # The lifeline's earliest judgement (two intervals after the server's start) comes
    # after X's presence lapsed: its presence can't name X's connections then.
    assert back + LATE_BEATS * interval > lapses
    wait_until(
        lambda: all(runs(r, x.prefix).get(f"{t}:start") == 2 for t in tokens),
        30,
        0.1,
        message="the 4 jobs started again",
    )
    took = time.monotonic() - back
    assert not r.exists(keys.process(x_ident))
    assert re.search(rf"process {re.escape(x_ident)} is gone", rescuer.log()), rescuer.log()[-3000:]
    wait_until(
        lambda: all(runs(r, x.prefix).get(f"{t}:end") == 1 for t in tokens),
        30,
        message="the second runs finished",
    )
    print(f"restarted {took:.1f}s after Redis was back")
    assert rescuer.stop() == 0


def test_a_worker_killed_as_the_stamps_are_lost_is_found(worker, prefix, r):
    """X is SIGKILLed and the stamps' hash is lost at once (overwritten with a wrong type
    and moved aside by the key guard: gone, here deleted). The rescuer stamps again at its
    next beat, X never does; X is still listed with its jobs, so the lifeline times it
    from when it first saw it without a stamp and finds no connection of its: its jobs
    start again within seconds, not ORPHAN_THRESHOLD (300 s) later."""
    x, x_ident = start_pair(worker)
    tokens = [f"u{i}" for i in range(4)]
    tj.tracked.enqueue_many([(15, t) for t in tokens])
    holding(r, x_ident, 4)
    rescuer = worker(settings=DEFAULTS)
    time.sleep(1)  # the rescuer has seen X (stamped, named) at least once
    x.signal(signal.SIGKILL)
    x.wait()
    r.delete(keys.last_beat())
    lost = time.monotonic()
    wait_until(
        lambda: all(runs(r, prefix).get(f"{t}:start") == 2 for t in tokens),
        25,
        0.1,
        message="the 4 jobs started again",
    )
    took = time.monotonic() - lost
    assert re.search(rf"process {re.escape(x_ident)} is gone", rescuer.log()), rescuer.log()[-3000:]
    wait_until(
        lambda: all(runs(r, prefix).get(f"{t}:end") == 1 for t in tokens),
        30,
        message="the second runs finished",
    )
    print(f"restarted {took:.1f}s after the stamps were lost")
    assert rescuer.stop() == 0
