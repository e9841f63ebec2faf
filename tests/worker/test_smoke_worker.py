"""End-to-end smoke: a real worker runs pushed jobs and stops cleanly on TERM."""

import signal

from testapp import jobs as tj

from ..helpers import wait_until


def test_worker_runs_jobs_and_stops_on_term(worker, r, prefix):
    tokens = [f"t{i}" for i in range(20)]
    tj.record.enqueue_many([(t,) for t in tokens])
    w = worker()
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 20, 20, message="20 runs")
    assert all(v == "1" for v in r.hgetall(f"{prefix}:test:runs").values())
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    assert r.scard(f"{prefix}:processes") == 0
    assert not r.exists(f"{prefix}:inprogress_ids") or r.scard(f"{prefix}:inprogress_ids") == 0
