"""Redis stopped for 10 s in the middle of a run, then started again: the workers go on
without a restart, no job is lost, and nobody is taken for an orphan (rule 13).

The private server persists every write (``appendonly yes``, ``appendfsync always``), so
stopping it (SIGKILL) and starting it again loses nothing it acknowledged: the test is
about the workers, not about a Redis that forgets. (A server without persistence would
lose the queues themselves; ``DEBUG SLEEP`` or ``CLIENT PAUSE`` would only delay
commands, not refuse connections.)"""

from __future__ import annotations

import re
import time

from testapp import jobs as tj

from ..helpers import wait_until


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
