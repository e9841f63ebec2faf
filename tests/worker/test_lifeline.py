"""The lifeline at the DEFAULT timings (HEARTBEAT_INTERVAL 5 s, ORPHAN_THRESHOLD 300 s):
a killed worker's jobs start again on another within 15 s, because its beat is late and
no connection named after it is left on Redis; a worker that stalls (SIGSTOP), a Redis
paused (CLIENT PAUSE) and a Redis restarted (every connection dropped at once) make
nobody look dead (worker/recovery.py, docs/reliability.md)."""

from __future__ import annotations

import re
import signal
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
