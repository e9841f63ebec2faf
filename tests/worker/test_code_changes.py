"""Code that changes under a running worker: a job added to a module after the worker
started is filed in dead saying "restart the worker" (not the module rules, which the
file meets); the worker logs once that a job module it imported changed on disk; and
``--reload`` restarts the worker on a change (handing back what runs), so the new job
runs with no manual restart. Real worker processes, on a job module written by the test
(COGWORKER["JOB_MODULES"]) in a folder of its own on PYTHONPATH."""

from __future__ import annotations

import json
import os
import secrets
import signal
import textwrap
import time

import pytest

from cogworker_django.core import payload
from cogworker_django.store import keys

from ..helpers import wait_until

FIRST = textwrap.dedent(
    """
    import redis
    from django.conf import settings
    from cogworker_django import job


    def _mark(name):
        c = settings.COGWORKER
        r = redis.Redis.from_url(c["REDIS_URL"])
        r.hincrby(c["PREFIX"] + ":test:runs", name, 1)


    @job
    def first():
        _mark("first")
    """
)

ADDED = textwrap.dedent(
    """

    @job
    def added():
        _mark("added")
    """
)


@pytest.fixture
def hot_module(tmp_path):
    """(module name, its file, the worker's settings and env): a job module of the test's
    own, imported by the worker (JOB_MODULES)."""
    name = f"hotjobs_{secrets.token_hex(4)}"
    path = tmp_path / f"{name}.py"
    path.write_text(FIRST)
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
        # No stale bytecode: an edit within the second of the first write, same size.
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return name, path, {"JOB_MODULES": [name]}, env


def _edit(path, text):
    path.write_text(text)
    later = time.time() + 1  # the file's time is surely after the worker's start
    os.utime(path, (later, later))


def _runs(r, name):
    return int(r.hget(f"{keys.prefix()}:test:runs", name) or 0)


def _push(r, func):
    job = payload.build(func, [], {}, queue="default")
    r.lpush(keys.queue("default"), payload.encode(job))
    return job["jid"]


def test_a_job_added_after_the_start_says_restart_the_worker(worker, r, hot_module):
    name, path, settings, env = hot_module
    w = worker(settings=settings, env=env)
    _push(r, f"{name}.first")
    wait_until(lambda: _runs(r, "first") == 1, 15, message="the first job")

    _edit(path, FIRST + ADDED)
    w.wait_for_log(rf"{name} \(.*\) changed on disk since this worker started", timeout=15)
    jid = _push(r, f"{name}.added")
    dead_key = keys.dead(keys.home_of("default"))
    wait_until(lambda: r.zcard(dead_key) == 1, 15, message="the dead entry")
    (dead,) = [json.loads(x) for x in r.zrange(dead_key, 0, -1)]
    assert dead["jid"] == jid and dead["error_class"] == "NotRegistered"
    assert f"its module {name} ({path}) changed after this worker started" in dead["error_message"]
    assert "restart the worker" in dead["error_message"]
    assert "jobs.py and tasks.py modules" not in dead["error_message"]  # not the rules
    time.sleep(2.5)  # another look of the code watch: still one line
    assert w.stop() == 0
    assert len([x for x in w.log().splitlines() if "changed on disk" in x]) == 1
    assert _runs(r, "added") == 0


def test_an_unknown_job_of_an_unchanged_module_gets_the_rules(worker, r, hot_module):
    name, _path, settings, env = hot_module
    worker(settings=settings, env=env)
    _push(r, f"{name}.missing")
    dead_key = keys.dead(keys.home_of("default"))
    wait_until(lambda: r.zcard(dead_key) == 1, 15, message="the dead entry")
    (dead,) = [json.loads(x) for x in r.zrange(dead_key, 0, -1)]
    assert "restart the worker" not in dead["error_message"]
    assert "jobs.py and tasks.py modules" in dead["error_message"]


def test_reload_runs_a_job_added_to_a_module_without_a_manual_restart(worker, r, hot_module):
    name, path, settings, env = hot_module
    w = worker(settings=settings, env=env, args=["--reload"])
    _push(r, f"{name}.first")
    wait_until(lambda: _runs(r, "first") == 1, 15, message="the first job")

    _edit(path, FIRST + ADDED)
    w.wait_for_log(r"changed: restarting the worker", timeout=15)
    w.wait_for_log(r"cogworker \S+ started", count=2, timeout=30)
    _push(r, f"{name}.added")
    wait_until(lambda: _runs(r, "added") == 1, 15, message="the added job")
    log = w.log()
    assert log.count("SIGTERM received: stopping") == 1  # the first worker stopped as on TERM
    assert "--reload (development only)" in log
    assert r.zcard(keys.dead(keys.home_of("default"))) == 0
    assert w.stop() == 0
    assert w.log().count("SIGTERM received: stopping") == 2  # TERM passed on to the worker


def test_reload_hands_back_a_running_job_and_the_fresh_worker_runs_it(worker, r, hot_module):
    name, path, settings, env = hot_module
    slow = FIRST + textwrap.dedent(
        """

        @job
        def slow():
            import time
            _mark("slow-start")
            time.sleep(3600)
        """
    )
    path.write_text(slow)
    w = worker(settings={**settings, "SHUTDOWN_TIMEOUT": 0.5}, env=env, args=["--reload"])
    jid = _push(r, f"{name}.slow")
    wait_until(lambda: _runs(r, "slow-start") == 1, 15, message="the slow job")
    _edit(path, slow + ADDED)
    # The first worker's TERM hands the job back; the fresh one runs it again.
    wait_until(lambda: _runs(r, "slow-start") == 2, 30, message="the slow job again")
    assert f"(jid {jid}, interrupted 1x)" in w.log()
    w.signal(signal.SIGINT)  # Ctrl-C: passed on to the worker as TERM
    assert w.wait(30) == 0


def test_reload_and_processes_refuse_each_other(worker, hot_module):
    from ..helpers import run_command

    done = run_command(keys.prefix(), "cogworker", "--reload", "--processes", "2")
    assert done.returncode != 0
    assert "--reload runs one worker process" in done.stderr
