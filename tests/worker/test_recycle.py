"""Recycling (``--max-jobs``, ``--max-memory``): a process stops fetching, finishes its
running jobs, hands back the rest and exits 0, or is replaced under ``--processes``; the
reason is logged and the admin's Processes page shows it. Real worker processes."""

from __future__ import annotations

import re
import signal
import time

import pytest

from cogworker_django.conf import DEFAULTS
from cogworker_django.core import payload
from cogworker_django.worker import recycle

from ..admin_support import fast_passwords_fixture, url  # noqa: F401 - autouse fixture
from ..helpers import FAST_SETTINGS, run_command, wait_until

# Every timing at its production value (HEARTBEAT_INTERVAL 5 s, SHUTDOWN_TIMEOUT 25 s...).
PRODUCTION = {k: DEFAULTS[k] for k in FAST_SETTINGS if k != "RETRY_BACKOFF"}


def push(r, prefix, func, *args, count=1, queue="default"):
    jobs = [payload.build(func, list(args) + [f"t{i}"], queue=queue) for i in range(count)]
    r.lpush(f"{prefix}:queue:{queue}", *[payload.encode(j) for j in jobs])
    return [f"t{i}" for i in range(count)]


def runs(r, prefix):
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def in_progress(r, prefix):
    return sum(r.llen(k) for k in r.keys(f"{prefix}:inprogress:*"))


def test_max_jobs_50_over_120_jobs_exits_0_after_about_50_none_lost_none_twice(worker, r, prefix):
    tokens = push(r, prefix, "testapp.jobs.slow", 0.05, count=120)
    w = worker(args=["--max-jobs", "50", "-c", "5"], settings=PRODUCTION)
    assert w.wait(60) == 0
    ran = runs(r, prefix)
    assert all(n == 1 for n in ran.values()), ran
    # The 50th start quiets the process: only runs whose fetch was already out may
    # follow (at most one per thread).
    assert 50 <= len(ran) <= 55, len(ran)
    assert r.llen(f"{prefix}:queue:default") == 120 - len(ran)  # the rest, handed back
    assert in_progress(r, prefix) == 0
    log = w.log()
    assert "recycling: 50 jobs started (--max-jobs 50): no new jobs fetched" in log
    assert re.search(r"cogworker \S+ stopped", log)
    # A fresh process runs the rest: every job exactly once.
    w2 = worker(settings=PRODUCTION)
    wait_until(lambda: len(runs(r, prefix)) == 120, 60, message="the rest ran")
    w2.stop()
    assert runs(r, prefix) == dict.fromkeys(tokens, 1)


def test_max_memory_recycles_a_process_whose_job_grows_its_rss(worker, r, prefix):
    w = worker(args=["--max-memory", "400", "-c", "2"])
    push(r, prefix, "testapp.jobs.grow_memory", 450)
    assert w.wait(60) == 0
    log = w.log()
    found = re.search(r"recycling: RSS (\d+) MiB passed --max-memory 400 MiB", log)
    assert found, log[-3000:]
    assert int(found.group(1)) > 400
    assert runs(r, prefix) == {"t0": 1}
    assert in_progress(r, prefix) == 0


def test_a_memory_limit_already_passed_at_start_is_ignored_with_an_error(worker, r, prefix):
    w = worker(args=["--max-memory", "1"])
    w.wait_for_log(r"--max-memory 1 MiB ignored: this process uses \d+ MiB already at its start")
    push(r, prefix, "testapp.jobs.record")
    wait_until(lambda: runs(r, prefix) == {"t0": 1}, 30, message="a job ran")
    assert w.proc.poll() is None  # still running: not recycled at every beat
    assert w.stop() == 0


def test_processes_2_max_jobs_replaces_the_children(worker, r, prefix):
    tokens = push(r, prefix, "testapp.jobs.slow", 0.02, count=40)
    w = worker(args=["--processes", "2", "--max-jobs", "5", "-c", "2"])
    wait_until(lambda: len(runs(r, prefix)) == 40, 90, message="every job ran")
    assert runs(r, prefix) == dict.fromkeys(tokens, 1)
    replaced = re.findall(
        r"worker process \d+ exited on its own .*; starting a replacement", w.log()
    )
    assert len(replaced) >= 40 // (5 + 2) - 2, w.log()[-3000:]
    assert "exited with" not in w.log()  # none taken for a crash
    assert w.proc.poll() is None  # the supervisor runs on
    wait_until(lambda: len(w.children()) == 2, 30, message="two children")
    assert w.stop() == 0


@pytest.mark.django_db
def test_the_processes_page_shows_a_recycling_process(worker, r, prefix, admin_client):
    w = worker(args=["--max-jobs", "1", "-c", "2"])
    push(r, prefix, "testapp.jobs.slow", 6)
    w.wait_for_log(r"recycling: 1 jobs started \(--max-jobs 1\)")
    from cogworker_django.api import ProcessSet

    wait_until(lambda: ProcessSet().list()[0].recycling, 10, message="the beat says it")
    (process,) = ProcessSet().list()
    assert process.recycling == "1 jobs started (--max-jobs 1)"
    assert process.quiet
    page = admin_client.get(url("process")).content.decode()
    assert "recycling" in page and "1 jobs started (--max-jobs 1)" in page
    assert w.wait(30) == 0  # once the job is done
    assert runs(r, prefix) == {"t0": 1}


def test_term_while_recycling_stops_as_term_does(worker, r, prefix):
    w = worker(args=["--max-jobs", "1", "-c", "2"], settings={"SHUTDOWN_TIMEOUT": 1})
    push(r, prefix, "testapp.jobs.slow", 30)
    w.wait_for_log(r"recycling: 1 jobs started")
    w.signal(signal.SIGTERM)
    started = time.monotonic()
    assert w.wait(30) == 0
    assert time.monotonic() - started < 15
    assert r.llen(f"{prefix}:queue:default") == 1  # the unfinished job, requeued
    assert in_progress(r, prefix) == 0


@pytest.mark.parametrize("flag", ["--max-jobs", "--max-memory"])
def test_a_limit_below_1_is_refused_with_one_line(prefix, flag):
    done = run_command(prefix, "cogworker", flag, "0")
    assert done.returncode != 0
    assert done.stderr.strip() == f"CommandError: {flag} must be at least 1, got 0"


def test_the_recycler_asks_once():
    asked = []
    recycler = recycle.Recycler(max_jobs=2)
    recycler.bind(asked.append)
    for _ in range(5):
        recycler.run_started()
    assert asked == ["2 jobs started (--max-jobs 2)"]
    assert recycle.rss_mib() > 1


def test_max_jobs_counts_async_runs_too(worker, r, prefix):
    tokens = push(r, prefix, "testapp.async_jobs.shared_client", count=30)
    w = worker(args=["--max-jobs", "10", "--async-concurrency", "3"])
    assert w.wait(60) == 0
    ran = runs(r, prefix)
    assert all(n == 1 for n in ran.values()), ran
    # The 10th start quiets the process; jobs a fetch already handed to the loop's free
    # slots (three here) may still start.
    assert 10 <= len(ran) <= 10 + 3 + 5, len(ran)
    assert r.llen(f"{prefix}:queue:default") == 30 - len(ran)
    assert in_progress(r, prefix) == 0
    assert "recycling: 10 jobs started (--max-jobs 10)" in w.log()
    assert set(ran) <= set(tokens)
