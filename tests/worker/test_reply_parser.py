"""redis-py's reply parser: hiredis (its C parser, a dependency) when importable, redis-py's
own Python parser otherwise. Everything the worker reads from Redis (fetch replies, the
heartbeat's pipeline, settle and history scripts, the hand-over) goes through whichever
one the process has: a real worker with hiredis made unimportable runs, fails, retries,
records and hands over exactly as the default one does."""

from __future__ import annotations

import json
import re

import pytest
from testapp import jobs as tj

from ..helpers import wait_until

# Loaded by Python at start-up from PYTHONPATH: hiredis can't be imported in that process,
# as on a platform with no hiredis wheel.
NO_HIREDIS = "import sys\nsys.modules['hiredis'] = None\n"


def start_line(w) -> str:
    lines = [ln for ln in w.log().splitlines() if re.search(r"cogworker \S+ started", ln)]
    assert len(lines) == 1, w.log()
    return lines[0]


def test_the_default_install_parses_with_hiredis(worker):
    pytest.importorskip("hiredis")  # a dependency: only missing where it has no wheel
    w = worker()
    assert "parser=hiredis" in start_line(w)
    assert w.stop() == 0


def test_without_hiredis_the_worker_runs_everything_the_same(worker, r, prefix, tmp_path):
    (tmp_path / "sitecustomize.py").write_text(NO_HIREDIS)
    tj.record.enqueue_many([(f"t{i}",) for i in range(50)])
    tj.always_fails.enqueue("boom")
    tj.slow.enqueue(30, "held")  # still running at the stop: handed over
    w = worker(env={"PYTHONPATH": str(tmp_path)}, settings={"CONCURRENCY": 4})
    assert "parser=python" in start_line(w)
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") >= 50, 20, message="50 runs")
    wait_until(lambda: r.zcard(f"{prefix}:retry") == 1, 20, message="the failure filed")
    # Every success was acked (the fetches' replies and acks parsed in Python): only the
    # slow job is left on the process's list.
    wait_until(
        lambda: sum(r.llen(k) for k in r.keys(f"{prefix}:inprogress:*")) == 1,
        10,
        message="every success acked",
    )
    assert all(v == "1" for v in r.hgetall(f"{prefix}:test:runs").values())
    assert w.stop() == 0
    # The hand-over put the slow job back on its queue, and nothing is left listed (the
    # failure's retry may have come due meanwhile on a slow machine: it is either place).
    queued = [json.loads(raw)["func"] for raw in r.lrange(f"{prefix}:queue:default", 0, -1)]
    assert sorted(queued) in (
        ["testapp.jobs.slow"],
        ["testapp.jobs.always_fails", "testapp.jobs.slow"],
    )
    assert len(queued) + r.zcard(f"{prefix}:retry") == 2
    assert sum(r.llen(k) for k in r.keys(f"{prefix}:inprogress:*")) == 0
    # The history of the runs was written (the flusher's script and its reply).
    assert r.xlen(f"{prefix}:history") >= 51
