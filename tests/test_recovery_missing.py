"""A process seen missing (no presence, beats stopped) is logged once, with how many jobs
it left and about when they will be recovered: until then they show nowhere else but
the admin's "awaiting recovery" list."""

from __future__ import annotations

import re

from testapp import jobs as tj

from .helpers import wait_until


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
