"""Once settled, never run again, with real (in-process) workers and real faults: an ack that Redis
never applied (writes paused past the client's timeout) is retried while the worker
runs on, not only at shutdown; a fetch whose reply is lost on the wire (the script ran,
the connection dropped before its reply arrived: tests/helpers.ReplyCutter) is put
back by the reconcile and runs once."""

from __future__ import annotations

import json
import re
import time

from testapp import jobs as tj

from cogworker_django.store import keys, scripts

from ..helpers import FAST_SETTINGS, ReplyCutter, wait_until
from .test_reliable_fetch import Monitor


def runs(c, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in c.hgetall(f"{prefix}:test:runs").items()}


def beating(c, prefix, w) -> bool:
    """The worker is still up: listed, its presence key alive."""
    return c.sismember(f"{prefix}:processes", w.identity) and c.exists(
        f"{prefix}:process:{w.identity}"
    )


def test_a_failed_ack_is_retried_while_the_worker_runs_on(
    redis_server, inworker, worker_log, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    c = server.client()
    # One thread: while it runs "short" nothing fetches, so the one fetch in the pause is
    # the one carrying its ack.
    settings = {"REDIS_OPTIONS": {"socket_timeout": 1.5}, "CONCURRENCY": 1}
    w = inworker(settings=settings)
    inprogress = keys.inprogress(w.identity, keys.home_of("default"))
    jid = tj.count_then_sleep.enqueue(1.0, "short")
    wait_until(lambda: runs(c, prefix).get("short") == 1, 10, message="the job started")
    assert len(c.lrange(inprogress, 0, -1)) == 1
    # What Redis runs from here that names the job and the list: its acks.
    with Monitor(server, watch=(jid, inprogress)) as mon:
        # "short" finishes inside the pause: the fetch carrying its ack times out and
        # Redis drops it with the client's connection (never run).
        c.execute_command("CLIENT", "PAUSE", 6000, "WRITE")
        worker_log.wait_for_log(r"Fetch: Redis unavailable \(TimeoutError", timeout=10)
        # No stop: the worker acks it by itself once writes work again.
        wait_until(lambda: c.llen(inprogress) == 0, 15, message="the retried ack")
    # Acked once, by the heartbeat's retry, never by the fetch that carried it: the fetch
    # script asking for no job, to keep the run's result with the ack (core/results.py).
    (ack,) = mon.lines
    assert ack.startswith(f"EVALSHA {scripts.get('fetch').sha}"), mon.lines
    assert ack.rstrip().endswith(" 0"), ack  # no job asked for
    other = inworker(settings=settings)
    # Two orphan thresholds of both workers beating and reconciling: nobody runs it again.
    deadline = time.monotonic() + 2 * FAST_SETTINGS["ORPHAN_THRESHOLD"]
    while time.monotonic() < deadline:
        assert runs(c, prefix) == {"short": 1}
        assert c.llen(keys.queue("default")) == 0
        time.sleep(0.1)
    for x in (w, other):
        assert beating(c, prefix, x)
    log = worker_log.log()  # both workers'
    assert "from dead process" not in log and "lost fetch reply" not in log
    w.stop()
    other.stop()
    assert "requeued" not in worker_log.log()
    assert runs(c, prefix) == {"short": 1}


def test_a_lost_fetch_reply_is_put_back_and_runs_once(redis_server, inworker, worker_log, prefix):
    server = redis_server()
    cutter = ReplyCutter(server)
    c = server.client()  # the test's own reads go straight in
    try:
        # The worker's client, and the test's pushes (a push's reply carries no payload),
        # go through the cutter.
        w = inworker(settings={"REDIS_URL": cutter.url}, concurrency=2)
        inprogress = keys.inprogress(w.identity, keys.home_of("default"))
        # The first reply carrying one of these jobs is a fetch's (the worker's list is
        # empty, so no other read returns them yet): the script moved the jobs, the
        # worker never hears of them.
        cutter.arm(b"testapp.jobs.record")
        tokens = [f"lost{i}" for i in range(3)]
        tj.record.enqueue_many([(t,) for t in tokens])
        assert cutter.cut.wait(10), "no fetch reply carried the jobs"
        # Held in their queue once put back, to be read there.
        c.sadd(keys.paused(keys.home_of("default")), "default")
        worker_log.wait_for_log(
            r"requeued \d+ job\(s\) this process had taken without knowing it", timeout=15
        )
        (n,) = map(
            int, re.findall(r"requeued (\d+) job\(s\) this process had taken", worker_log.log())
        )
        assert 1 <= n <= len(tokens)
        assert c.llen(inprogress) == 0
        # Back in the queue (with any the worker had not fetched yet), not run, and not
        # counted as an orphaning.
        queued = [json.loads(x) for x in c.lrange(keys.queue("default"), 0, -1)]
        assert len(queued) >= n, queued
        assert all(not j.get("orphan_count") for j in queued), queued
        assert not any(runs(c, prefix).get(j["args"][0]) for j in queued), runs(c, prefix)
        c.srem(keys.paused(keys.home_of("default")), "default")
        wait_until(
            lambda: all(runs(c, prefix).get(t) == 1 for t in tokens), 15, message="every job"
        )
        # Past an orphan threshold: each ran once, none was counted as an orphaning.
        time.sleep(FAST_SETTINGS["ORPHAN_THRESHOLD"] + 1)
        assert runs(c, prefix) == {t: 1 for t in tokens}
        assert c.llen(inprogress) == 0 and c.llen(keys.queue("default")) == 0
        assert "from dead process" not in worker_log.log()
        assert beating(c, prefix, w)
        w.stop()
    finally:
        cutter.close()
