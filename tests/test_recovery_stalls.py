"""Rule 13 under stalls: nobody is taken for dead because Redis stalled or a process was
starved of CPU for less than ORPHAN_THRESHOLD.

A checker judges another process dead only once that process has missed its beats for
a full ORPHAN_THRESHOLD during which Redis kept answering the checker (measured on
Redis's clock, from the checker's own start and from the end of the last break it saw),
and a process without a readable last-beat stamp only a full threshold after the
checker first saw it so.
"""

from __future__ import annotations

import signal
import time

import redis
from testapp import jobs as tj

from cogworker_django import keys

from .helpers import wait_until


def identity_of(w) -> str:
    w.wait_for_log(r"identity=\S+")
    return w.log().split("identity=")[1].split()[0]


def runs(r) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{keys.prefix()}:test:runs").items()}


def settled(r) -> bool:
    lists = [keys.queue("default"), *r.keys(f"{keys.prefix()}:inprogress:*")]
    return all(r.llen(k) == 0 for k in lists)


def test_a_worker_starved_across_a_redis_pause_keeps_its_jobs(redis_server, configure, worker):
    """X holds three long jobs. It is stopped (SIGSTOP) as Redis is paused (CLIENT PAUSE
    for longer than ORPHAN_THRESHOLD) and stays stopped for a while after the pause ends:
    longer than the checker needs for two beats and a pass, shorter than the threshold.
    Its last beat is then older than the threshold and its presence key is gone, but
    Redis answered the checker for less than a threshold since the pause: X is alive,
    and none of its jobs is recovered or run twice."""
    threshold = 5.0
    server = redis_server()
    configure(REDIS_URL=server.url)
    r = server.client()
    settings = {"ORPHAN_THRESHOLD": threshold}
    # The checker reads another queue: every job goes to X, and a wrongly recovered job
    # goes back to the queue X reads, where a second run shows.
    checker = worker(redis_url=server.url, settings={**settings, "QUEUES": ["elsewhere"]})
    checker_up = time.monotonic()
    x = worker(redis_url=server.url, settings=settings)
    x_ident = identity_of(x)
    tokens = [f"long{i}" for i in range(3)]
    tj.tracked.enqueue_many([(20, t) for t in tokens])
    wait_until(lambda: r.llen(keys.inprogress(x_ident)) == 3, 10, message="X holds the 3 jobs")
    # The checker has been beating for a full threshold: its start alone protects nobody.
    wait_until(lambda: time.monotonic() - checker_up >= threshold, threshold + 1)

    x.signal(signal.SIGSTOP)
    try:
        pause = threshold + 1
        r.client_pause(int(pause * 1000))
        paused_at = time.monotonic()
        # Answered only once the pause is over.
        redis.Redis(port=server.port, socket_timeout=30).get("unpaused?")
        assert time.monotonic() - paused_at >= pause - 0.5
        starved = threshold / 2  # > two beats and a pass of the checker, < the threshold
        time.sleep(starved)
        assert not r.exists(keys.process(x_ident))  # X's presence has lapsed
    finally:
        x.signal(signal.SIGCONT)
    wait_until(
        lambda: all(runs(r).get(f"{t}:end") for t in tokens), 30, message="X finished its jobs"
    )
    assert "from dead process" not in checker.log(), checker.log()[-3000:]
    wait_until(lambda: settled(r), 10, message="nothing queued or in progress")
    assert runs(r) == {**{f"{t}:start": 1 for t in tokens}, **{f"{t}:end": 1 for t in tokens}}
    assert x.stop() == 0
    assert checker.stop() == 0
