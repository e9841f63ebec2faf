"""Async jobs through a worker's death and its stop, in real workers: a SIGKILL with a
hundred coroutines running loses none (the in-progress list is the record: the next
worker runs every one again); TERM lets running coroutines finish within
SHUTDOWN_TIMEOUT (production value) and cancels and requeues the rest, none lost and
none both requeued and filed."""

from __future__ import annotations

import json
import re

from testapp import async_jobs as aj

from ..helpers import wait_until


def runs(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def counted(r, prefix, name) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:{name}").items()}


def test_sigkill_with_a_hundred_coroutines_running_loses_none(worker, r, prefix):
    tokens = [f"k-{i}" for i in range(100)]
    aj.long_first_run.enqueue_many([(t,) for t in tokens])
    first = worker()
    wait_until(lambda: len(counted(r, prefix, "starts")) == 100, 30, message="100 running")
    assert any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*"))
    first.kill()  # SIGKILL: no hand-over, nothing settled
    assert runs(r, prefix) == {}
    second = worker()  # recovers the dead process's list after ORPHAN_THRESHOLD
    wait_until(lambda: len(runs(r, prefix)) == 100, 60, message="every job run again")
    assert second.stop() == 0
    assert runs(r, prefix) == {t: 1 for t in tokens}
    assert counted(r, prefix, "starts") == {t: 2 for t in tokens}
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0


def test_term_finishes_what_can_finish_and_requeues_the_rest(worker, r, prefix):
    quick = [f"q-{i}" for i in range(20)]
    stuck = [f"s-{i}" for i in range(20)]
    aj.started_then_waits.enqueue_many([(2.0, t) for t in quick])
    aj.long_first_run.enqueue_many([(t,) for t in stuck])
    # Production SHUTDOWN_TIMEOUT (25 s).
    w = worker(settings={"SHUTDOWN_TIMEOUT": 25})
    wait_until(
        lambda: len(counted(r, prefix, "starts")) == 40, 30, message="all 40 coroutines running"
    )
    assert w.stop(60) == 0
    log = w.log()
    # The quick ones finished within the timeout, once each; the stuck ones were
    # cancelled (their finally blocks ran) and requeued, none filed.
    assert {t: runs(r, prefix).get(t) for t in quick} == {t: 1 for t in quick}
    assert not any(t in runs(r, prefix) for t in stuck)
    assert {t: counted(r, prefix, "unwound").get(t) for t in stuck} == {t: 1 for t in stuck}
    assert "shutdown timeout: 20 job(s) still running" in log
    assert re.search(r"requeued 20 job\(s\) unfinished at shutdown", log), log
    queued = [json.loads(x) for x in r.lrange(f"{prefix}:queue:default", 0, -1)]
    assert sorted(j["args"][0] for j in queued) == sorted(stuck)
    assert not any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*"))
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    # One line for the 20 cancelled coroutines, not one each.
    assert log.count("cancelled 20 coroutine(s) still running at the stop") == 1
    assert "ended after the shutdown hand-over requeued it" not in log
    # The next worker runs each requeued job once.
    again = worker()
    wait_until(lambda: all(runs(r, prefix).get(t) == 1 for t in stuck), 30, message="requeued")
    assert again.stop() == 0
    assert {t: counted(r, prefix, "starts").get(t) for t in stuck} == {t: 2 for t in stuck}
    assert set(runs(r, prefix).values()) == {1}
