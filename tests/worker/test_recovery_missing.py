"""A process seen missing (no presence, beats stopped) is logged once, with how many jobs
it left and about when they will be recovered: until then they show nowhere else but
the admin's "awaiting recovery" list."""

from __future__ import annotations

import re
import signal

from testapp import jobs as tj

from ..helpers import wait_until


def test_a_killed_worker_is_logged_missing_once_before_its_jobs_are_recovered(worker, r, prefix):
    settings = {"ORPHAN_THRESHOLD": 8, "CONCURRENCY": 3}
    tj.tracked.enqueue_many([(30, f"m{i}") for i in range(3)])
    a = worker(settings=settings)
    (ident,) = wait_until(lambda: r.smembers(f"{prefix}:processes"), 10, message="registered")
    wait_until(lambda: r.llen(f"{prefix}:inprogress:{ident}") == 3, 10)
    b = worker(settings=settings)
    a.kill()
    b.wait_for_log(
        rf"process {re.escape(ident)} is missing \(no beat for \d+s\): its 3 job\(s\)", 15
    )
    b.wait_for_log(rf"recovered 3 job\(s\) from dead process {re.escape(ident)}", 20)
    log = b.log()
    assert log.count(f"process {ident} is missing") == 1
    assert log.index("is missing") < log.index("recovered 3 job(s)")


def test_a_process_missing_again_after_it_came_back_is_logged_again(worker, r, prefix):
    """Once per silence, not once per process: a worker stopped (SIGSTOP), resumed and
    stopped again is logged missing twice, and, back each time before the threshold,
    keeps its jobs."""
    settings = {"ORPHAN_THRESHOLD": 20, "CONCURRENCY": 2}
    tj.tracked.enqueue_many([(60, f"m{i}") for i in range(2)])
    a = worker(settings=settings)
    (ident,) = wait_until(lambda: r.smembers(f"{prefix}:processes"), 10, message="registered")
    wait_until(lambda: r.llen(f"{prefix}:inprogress:{ident}") == 2, 10)
    b = worker(settings={**settings, "QUEUES": ["elsewhere"]})
    missing = rf"process {re.escape(ident)} is missing"
    for silence in (1, 2):
        a.signal(signal.SIGSTOP)
        try:
            b.wait_for_log(missing, 15, count=silence)
        finally:
            a.signal(signal.SIGCONT)
        wait_until(lambda: r.exists(f"{prefix}:process:{ident}"), 10, message="beating again")
    assert "from dead process" not in b.log()
    assert r.llen(f"{prefix}:inprogress:{ident}") == 2
    a.kill()
    b.kill()
