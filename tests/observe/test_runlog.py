"""A run's start and end are logged at DEBUG, with jid, job, queue and duration;
nothing per run at the default INFO."""

from __future__ import annotations

import re

from testapp import jobs as tj

from ..helpers import wait_until


def runs(r) -> dict[str, int]:
    from cogworker_django.store import keys

    return {k: int(v) for k, v in r.hgetall(f"{keys.prefix()}:test:runs").items()}


def test_start_and_done_lines_at_debug(worker, r):
    # The test project's LOGGING sets the logger's level (from COGWORKER_LOG_LEVEL), so
    # that is what turns DEBUG on here; without a LOGGING level, -v 2 does.
    w = worker(args=["-v", "2"], env={"COGWORKER_LOG_LEVEL": "DEBUG"})
    jid = tj.record.enqueue("logged")
    failing = tj.fails_once_dead.enqueue("no")
    wait_until(lambda: runs(r).get("logged") == 1, 10)
    w.wait_for_log(rf"fail: testapp\.jobs\.fails_once_dead jid={failing} queue=default", 10)
    log = w.log()
    assert re.search(rf"start: testapp\.jobs\.record jid={jid} queue=default", log)
    assert re.search(rf"done: testapp\.jobs\.record jid={jid} queue=default \d+\.\d{{3}}s", log)
    assert re.search(r"fail: testapp\.jobs\.fails_once_dead .* \d+\.\d{3}s RuntimeError", log)


def test_nothing_per_run_at_the_default_verbosity(worker, r):
    w = worker()
    jid = tj.record.enqueue("quiet")
    wait_until(lambda: runs(r).get("quiet") == 1, 10)
    assert jid not in w.log()
