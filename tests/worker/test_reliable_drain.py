"""20,000 jobs drained by two workers side by side (in this process): each ran exactly
once, every in-progress list is empty at the end, and the run history holds every run,
once, from both."""

from __future__ import annotations

import json
import time

from testapp import jobs as tj

from ..helpers import wait_until

N = 20_000


def test_20000_jobs_two_workers_each_exactly_once(inworker, r, prefix):
    tokens = [f"d{i}" for i in range(N)]
    jids: list[str] = []
    for i in range(0, N, 5000):
        jids += tj.record_where.enqueue_many([(t,) for t in tokens[i : i + 5000]])
    assert r.llen(f"{prefix}:queue:default") == N
    started = time.monotonic()
    workers = [inworker(concurrency=8) for _ in range(2)]
    idents = wait_until(
        lambda: (m := r.smembers(f"{prefix}:processes")) and len(m) == 2 and m,
        10,
        message="two processes",
    )
    # Both take part: each one's in-progress list seen holding jobs during the drain.
    working: set[str] = set()

    def drained() -> bool:
        working.update(i for i in idents if r.llen(f"{prefix}:inprogress:{i}"))
        return r.hlen(f"{prefix}:test:runs") == N

    wait_until(drained, 120, 0.25, message=f"{N} runs")
    assert working == set(idents), working
    took = time.monotonic() - started
    # Every in-progress list is empty once the queue is drained (the last ack rides on
    # each thread's next, empty, fetch).
    wait_until(
        lambda: all(r.llen(f"{prefix}:inprogress:{i}") == 0 for i in idents),
        5,
        message="empty in-progress lists",
    )
    runs = r.hgetall(f"{prefix}:test:runs")
    assert len(runs) == N
    bad = {k: v for k, v in runs.items() if v != "1"}
    assert not bad, f"{len(bad)} jobs ran more than once: {list(bad.items())[:5]}"
    for w in workers:
        w.stop()
    assert set(idents) == {w.identity for w in workers}
    processed = int(r.get(f"{prefix}:stat:processed"))
    assert processed == N
    assert not r.keys(f"{prefix}:inprogress:*")
    assert r.llen(f"{prefix}:queue:default") == 0
    # History complete after the drain (the last runs flushed at each worker's exit): one
    # success per job, from the two processes.
    recorded = [json.loads(f["run"]) for _, f in r.xrange(f"{prefix}:history")]
    assert len(recorded) == N
    assert sorted(run["jid"] for run in recorded) == sorted(jids)
    assert {run["status"] for run in recorded} == {"success"}
    # (Its "worker" field names the process's history writer: one per process.)
    print(f"\n{N} jobs drained by 2 workers in {took:.1f}s ({N / took:.0f} jobs/s)")
