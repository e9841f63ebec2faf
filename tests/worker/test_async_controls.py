"""Async jobs keep every feature of a plain one, in real workers: a failure is retried
with its traceback in the retry set and the history; a timeout cancels the coroutine
and the loop goes on; a cancel reaches a running coroutine (cooperative, and forced
after CANCEL_GRACE); a coroutine that blocks the loop is named in a warning, once per
function per minute; an async job queued behind busy threads is found; django.tasks
async tasks run on the loop."""

from __future__ import annotations

import json
import re
import time

import pytest
from testapp import async_jobs as aj
from testapp import jobs as tj

from cogworker_django import api

from ..helpers import free_port, wait_until

# A limit or a grace lands at its time, never before it; after it, within these bounds
# (generous: the machine may be loaded). EARLY allows for the moment between a run's
# deadline being armed and its job's first line, where the job stamps its start (a few
# ms; more on a loaded machine): a limit firing at a tenth of its 1 s still fails.
EARLY = 0.2
LATE = 5.0


def stamp(r, prefix, name) -> float:
    """A wall-clock time a test job wrote (``test:times``)."""
    return float(r.hget(f"{prefix}:test:times", name))


def runs(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def dead_jobs(r, prefix) -> list[dict]:
    return [json.loads(m) for m in r.zrange(f"{prefix}:dead", 0, -1)]


def history(r, prefix) -> list[dict]:
    return [json.loads(fields["run"]) for _id, fields in r.xrange(f"{prefix}:history")]


def test_an_async_job_that_raises_is_retried_with_its_traceback(worker, r, prefix):
    jid = aj.async_raises.enqueue("t1")
    w = worker()
    wait_until(
        lambda: runs(r, prefix).get("t1") == 1 and r.zcard(f"{prefix}:retry"),
        15,
        message="the first run filed in retry",
    )
    [retry] = [json.loads(m) for m in r.zrange(f"{prefix}:retry", 0, -1)]
    assert retry["jid"] == jid and retry["retry_count"] == 1
    assert retry["error_class"] == "ValueError"
    assert retry["error_message"] == "async boom t1"
    # The job's own frame, where it raised: not the worker's machinery.
    assert 'in async_raises\n    raise ValueError(f"async boom {token}")' in retry["traceback"]
    wait_until(lambda: dead_jobs(r, prefix), 20, message="the retry filed in dead")
    [dead] = dead_jobs(r, prefix)
    assert dead["jid"] == jid and dead["retry_count"] == 2 and "async_raises" in dead["traceback"]
    assert w.stop() == 0
    failed = [h for h in history(r, prefix) if h["jid"] == jid]
    assert [h["status"] for h in failed] == ["failed", "failed"]
    assert {h["error_message"] for h in failed} == {"async boom t1"}


def test_a_timeout_cancels_the_coroutine_and_the_loop_goes_on(worker, r, prefix):
    jid = aj.times_out.enqueue("late")
    w = worker()
    wait_until(lambda: dead_jobs(r, prefix), 20, message="the timed-out job in dead")
    [dead] = dead_jobs(r, prefix)
    assert dead["jid"] == jid and dead["error_class"].endswith("JobTimeout")
    assert "ran past its timeout of 1 s" in dead["error_message"]
    # The cancellation reached the coroutine (its finally ran), on the same loop, which
    # goes on running async jobs.
    assert r.hget(f"{prefix}:test:unwound", "late") == "1"
    # When it landed, on the job's own clock: at its timeout of 1 s (less the moment
    # between the deadline's arming and the coroutine's first line), and soon after.
    took = stamp(r, prefix, "late:interrupted") - stamp(r, prefix, "late:started")
    assert 1.0 - EARLY <= took <= 1.0 + LATE, took
    aj.where_am_i.enqueue_many([(f"after-{i}",) for i in range(20)])
    wait_until(
        lambda: all(runs(r, prefix).get(f"after-{i}") == 1 for i in range(20)),
        15,
        message="async jobs after the timeout",
    )
    assert "abandoned" not in w.log()
    assert w.stop() == 0
    assert any(h["status"] == "timeout" and h["jid"] == jid for h in history(r, prefix))


def test_a_running_coroutine_that_checks_is_cancelled_at_once(worker, r, prefix):
    jid = aj.waits_for_cancel.enqueue("c1")
    # A grace far longer than the wait below: only the coroutine's own check can end it.
    w = worker(settings={"CANCEL_GRACE": 600})
    wait_until(lambda: r.hget(f"{prefix}:test:starts", "c1") == "1", 15, message="started")
    assert api.cancel(jid) == "running"
    wait_until(
        lambda: any(h["jid"] == jid for h in history(r, prefix)),
        15,
        message="the cancelled run in history",
    )
    [run] = [h for h in history(r, prefix) if h["jid"] == jid]
    assert run["status"] == "cancelled"
    # Ended by its own check_cancelled(), not by a cancellation delivered at its await
    # (which would mean the worker cut it short without waiting out the grace).
    assert r.hget(f"{prefix}:test:ended", "c1") == "check"
    assert "c1" not in runs(r, prefix)
    assert dead_jobs(r, prefix) == [] and r.zcard(f"{prefix}:retry") == 0
    assert w.stop() == 0


def test_a_running_coroutine_that_never_checks_is_cancelled_after_the_grace(worker, r, prefix):
    # Production CANCEL_GRACE (5 s): the coroutine never looks at cancelled(); its task
    # is cancelled at its await once the grace is over.
    grace = 5.0
    jid = aj.deaf_to_cancel.enqueue("c2")
    w = worker()
    wait_until(lambda: r.hget(f"{prefix}:test:times", "c2:started"), 15, message="started")
    asked = time.time()  # the worker can only have been told after this
    assert api.cancel(jid) == "running"
    wait_until(
        lambda: r.hget(f"{prefix}:test:times", "c2:interrupted"),
        grace + 15,
        message="the interruption",
    )
    # Landed no sooner than the grace after the cancel, and within a generous bound.
    waited = stamp(r, prefix, "c2:interrupted") - asked
    assert grace <= waited <= grace + LATE, waited
    wait_until(
        lambda: any(h["jid"] == jid for h in history(r, prefix)),
        20,
        message="the cancelled run in history",
    )
    [run] = [h for h in history(r, prefix) if h["jid"] == jid]
    assert run["status"] == "cancelled"
    assert dead_jobs(r, prefix) == [] and r.zcard(f"{prefix}:retry") == 0
    assert not any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*"))
    assert w.stop() == 0


def test_a_coroutine_that_blocks_the_loop_is_named_once_a_minute(worker, r, prefix):
    first = aj.blocks_the_loop.enqueue(0.5, "b1")
    w = worker(settings={"ASYNC_CONCURRENCY": 1})
    wait_until(lambda: runs(r, prefix).get("b1") == 1, 15, message="the blocking job ran")
    aj.blocks_the_loop.enqueue(0.5, "b2")
    wait_until(lambda: runs(r, prefix).get("b2") == 1, 15, message="the second one ran")
    aj.where_am_i.enqueue("after")  # the loop's ticks after the second block
    wait_until(lambda: runs(r, prefix).get("after") == 1, 15, message="a job after them")
    assert w.stop() == 0
    warnings = re.findall(
        r"testapp\.async_jobs\.blocks_the_loop \(jid (\w+)\) held the event loop for "
        r"(\d+\.\d+) s: every other async job waited",
        w.log(),
    )
    # Named with its jid and how long it held the loop; the second run, within the
    # minute, is not named again.
    assert len(warnings) == 1, w.log()
    assert warnings[0][0] == first and float(warnings[0][1]) >= 0.4


def test_a_background_task_that_blocks_the_loop_is_named_too(worker, r, prefix):
    """A task a job started (not a job's run) blocking the loop for 1.5 s: named by its
    coroutine and where it is defined, as the job coroutines are by their jid."""
    aj.starts_a_blocking_task.enqueue(1.5, "bg")
    w = worker()
    wait_until(lambda: runs(r, prefix).get("bg") == 1, 15, message="the background task ran")
    aj.where_am_i.enqueue("after")  # the loop's ticks after the block
    wait_until(lambda: runs(r, prefix).get("after") == 1, 15, message="a job after it")
    assert w.stop() == 0
    found = re.findall(
        r"background task '[^']+' \(testapp\.async_jobs\._blocks_in_background, "
        r"\S+async_jobs\.py:\d+; not a job's run\) held the event loop for (\d+\.\d+) s",
        w.log(),
    )
    assert len(found) == 1 and float(found[0]) >= 1.0, w.log()[-3000:]


def test_an_async_job_behind_busy_threads_is_found(worker, r, prefix):
    tj.slow.enqueue_many([(30, f"slow-{i}") for i in range(2)])
    tj.record.enqueue("plain")
    aj.where_am_i.enqueue("async")
    w = worker(settings={"CONCURRENCY": 2})
    # Both threads sleep for 30 s; the loop's slots find the async job meanwhile (at
    # most CONCURRENCY plain jobs taken with it, to wait for a thread): production
    # PROBE_PAUSE (5 s).
    wait_until(lambda: runs(r, prefix).get("async") == 1, 20, message="the async job")
    assert "slow-0" not in runs(r, prefix) and "slow-1" not in runs(r, prefix)
    assert "plain" not in runs(r, prefix)
    w.kill()


def test_django_tasks_async_tasks_run_on_the_loop(worker, r):
    pytest.importorskip("django.tasks")
    from django.tasks import TaskResultStatus
    from testapp import tasks as tt

    where = tt.async_where.enqueue("w1")
    flaky = tt.async_task_fails_once.enqueue("f1")
    w = worker()
    for result in (where, flaky):
        wait_until(
            lambda result=result: result.refresh() or result.is_finished,
            20,
            message=f"{result.task.name} to finish",
        )
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert where.return_value == {"thread": "event-loop", "attempt": 1}
    assert flaky.return_value == 2 and flaky.attempts == 2
    assert flaky.errors[0].exception_class is RuntimeError
    assert w.stop() == 0


def test_a_coroutine_that_swallows_its_cancellation_is_filed_and_its_slot_comes_back(
    worker, r, prefix
):
    # Production TIMEOUT_GRACE (10 s): the timeout cancels it; it swallows that; ten
    # seconds later the watchdog files it and gives its slot back. The loop's only slot
    # (ASYNC_CONCURRENCY 1) then runs the next job.
    jid = aj.ignores_cancellation.enqueue("h1")
    w = worker(settings={"ASYNC_CONCURRENCY": 1})
    wait_until(lambda: r.hget(f"{prefix}:test:starts", "h1") == "1", 15, message="started")
    aj.where_am_i.enqueue("next")
    wait_until(lambda: dead_jobs(r, prefix), 30, message="the stuck coroutine filed in dead")
    [dead] = dead_jobs(r, prefix)
    assert dead["jid"] == jid and dead["error_class"].endswith("JobTimeout")
    assert "did not return within TIMEOUT_GRACE" in dead["error_message"]
    wait_until(lambda: runs(r, prefix).get("next") == 1, 15, message="the next job ran")
    assert re.search(r"async-\d+ abandoned and the job filed", w.log())
    assert not any(r.lrange(k, 0, -1) for k in r.keys(f"{prefix}:inprogress:*"))
    assert w.stop(60) == 0  # the coroutine still swallows; the loop closes regardless
    assert len(dead_jobs(r, prefix)) == 1 and r.llen(f"{prefix}:queue:default") == 0


def test_a_limiter_holds_async_jobs_while_others_run(worker, r, prefix):
    aj.limited_gauge.enqueue_many([(0.5, f"l-{i}") for i in range(6)])
    aj.where_am_i.enqueue_many([(f"free-{i}",) for i in range(20)])
    w = worker()
    wait_until(lambda: len(runs(r, prefix)) == 26, 60, message="all 26 runs")
    assert w.stop() == 0
    assert int(r.get(f"{prefix}:test:peak")) == 2  # the limit was used and kept
    assert set(runs(r, prefix).values()) == {1}
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0


def test_a_unique_async_job_holds_its_lock_through_the_run(worker, r, prefix):
    first = aj.unique_async.enqueue("u")
    assert aj.unique_async.enqueue("u") is None  # refused: the lock is held
    w = worker()
    wait_until(lambda: runs(r, prefix).get("u") == 1, 15, message="the unique run")
    wait_until(lambda: not r.keys(f"{prefix}:*unique*"), 15, message="its lock released")
    assert aj.unique_async.enqueue("u") not in (None, first)  # free again
    wait_until(lambda: runs(r, prefix).get("u") == 2, 15, message="the second run")
    assert w.stop() == 0


def test_running_coroutines_are_on_the_busy_page_and_processes_run_them(worker, r, prefix):
    aj.long_first_run.enqueue_many([(f"b-{i}",) for i in range(3)])
    aj.where_am_i.enqueue_many([(f"p-{i}",) for i in range(40)])
    w = worker(args=["--processes", "2"])
    wait_until(lambda: len(api.Workers().list()) == 3, 20, message="3 busy async jobs")
    busy = api.Workers().list()
    assert {b.thread.split("-")[0] for b in busy} == {"async"}
    assert sorted(b.record.job["args"][0] for b in busy) == ["b-0", "b-1", "b-2"]
    wait_until(
        lambda: all(runs(r, prefix).get(f"p-{i}") == 1 for i in range(40)),
        20,
        message="the async jobs of two processes",
    )
    assert set(r.hgetall(f"{prefix}:test:threads").values()) == {"event-loop"}
    assert {p.busy for p in api.ProcessSet().list()} <= {0, 1, 2, 3}
    assert sum(p.busy for p in api.ProcessSet().list()) == 3
    assert w.stop(60) == 0


def test_async_runs_and_the_loop_lag_are_in_the_worker_metrics(worker, r, prefix):
    from ..observe.test_metrics_worker import samples

    port = free_port()
    w = worker(args=["--metrics-port", str(port), "--metrics-addr", "127.0.0.1"])
    w.wait_for_log(rf"metrics served on http://127\.0\.0\.1:{port}/metrics")
    aj.where_am_i.enqueue_many([(f"m-{i}",) for i in range(5)])
    aj.blocks_the_loop.enqueue(1.0, "held")
    wait_until(lambda: len(runs(r, prefix)) == 6, 20, message="the six runs")
    m = wait_until(
        lambda: (
            lambda m: m if m.get(("cogworker_event_loop_lag_seconds", ()), 0) >= 0.9 else None
        )(samples(port)),
        8,
        interval=0.2,
        message="the hold in the lag metric (the worst of 10 s)",
    )
    key = (
        "cogworker_jobs_total",
        (("job", "testapp.async_jobs.where_am_i"), ("outcome", "success"), ("queue", "default")),
    )
    assert m[key] == 5
    assert w.stop() == 0


def test_async_members_of_a_batch_fire_its_callback_once(worker, r, prefix):
    from cogworker_django import Batch

    with Batch(on_success=tj.wf_callback.s("done")) as batch:
        aj.async_member.enqueue_many([(f"m-{i}",) for i in range(5)])
    w = worker()

    def callbacks():
        entries = [json.loads(e) for e in r.lrange(f"{prefix}:test:wf", 0, -1)]
        return [e for e in entries if e["kind"] == "callback" and e["callback_of"] == batch.bid]

    wait_until(lambda: len(callbacks()) == 1, 20, message="the batch's callback")
    assert set(runs(r, prefix).values()) == {1} and len(runs(r, prefix)) == 5
    assert w.stop() == 0
    assert len(callbacks()) == 1


def test_the_database_connection_an_async_run_opened_is_closed_after_it(worker, r, prefix):
    aj.uses_the_orm.enqueue("first")
    w = worker(settings={"ASYNC_CONCURRENCY": 1})
    wait_until(lambda: runs(r, prefix).get("first") == 1, 15, message="the first run")
    aj.uses_the_orm.enqueue("second")
    wait_until(lambda: runs(r, prefix).get("second") == 1, 15, message="the second run")
    assert w.stop() == 0
    # The second run found no connection left open by the first (asgiref's thread
    # keeps its thread-local one otherwise).
    assert r.hgetall(f"{prefix}:test:orm") == {"first": "closed", "second": "closed"}
