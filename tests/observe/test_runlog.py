"""A run's start and end are logged at DEBUG, with jid, job, queue and duration;
nothing per run at the default INFO."""

from __future__ import annotations

import logging
import re

from testapp import jobs as tj

from ..helpers import wait_until


def runs(r) -> dict[str, int]:
    from cogworker_django.store import keys

    return {k: int(v) for k, v in r.hgetall(f"{keys.prefix()}:test:runs").items()}


def test_start_and_done_lines_at_debug(inworker, worker_log, r):
    # The logger at DEBUG, as the command's -v 2 (or a LOGGING level) sets it.
    logging.getLogger("cogworker_django").setLevel(logging.DEBUG)
    inworker()
    jid = tj.record.enqueue("logged")
    failing = tj.fails_once_dead.enqueue("no")
    wait_until(lambda: runs(r).get("logged") == 1, 10)
    worker_log.wait_for_log(
        rf"fail: testapp\.jobs\.fails_once_dead jid={failing} queue=default", 10
    )
    log = worker_log.log()
    assert re.search(rf"start: testapp\.jobs\.record jid={jid} queue=default", log)
    assert re.search(rf"done: testapp\.jobs\.record jid={jid} queue=default \d+\.\d{{3}}s", log)
    assert re.search(r"fail: testapp\.jobs\.fails_once_dead .* \d+\.\d{3}s RuntimeError", log)


def test_nothing_per_run_at_the_default_verbosity(inworker, worker_log, r):
    inworker()  # the logger at INFO, the command's default
    jid = tj.record.enqueue("quiet")
    wait_until(lambda: runs(r).get("quiet") == 1, 10)
    assert jid not in worker_log.log()
