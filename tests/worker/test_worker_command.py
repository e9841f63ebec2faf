"""``manage.py cogworker``: bad options and bad settings exit non-zero with one clear
line (no traceback), a NaN timing and refused Redis credentials included; a good start
logs one summary line, and a warning for a Redis that keeps nothing on disk. (An
unreachable Redis is waited for: tests/worker/test_wait_for_redis.py.)
"""

from __future__ import annotations

import json
import math
import os
import re

import pytest

from cogworker_django import __version__

from ..helpers import free_port, run_command
from ..periodic.test_periodic_entries import GOOD


def _one_clear_line(result) -> str:
    assert result.returncode != 0, result
    out = (result.stdout + result.stderr).strip()
    assert "Traceback" not in out, out
    lines = out.splitlines()
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["-c", "0"], r"--concurrency must be at least 1, got 0"),
        (["--queue", "a:x"], r"--queue = 'a:x' is invalid: the weight after ':' must be"),
        (["--queue", "a b"], r"--queue = 'a b' is invalid"),
        (["--processes", "0"], r"--processes must be at least 1"),
        (["--shutdown-timeout", "-1"], r"--shutdown-timeout must be >= 0"),
        (["--tag", "a b"], r"--tag must not contain whitespace"),
    ],
)
def test_bad_option_exits_with_one_line(prefix, args, expected):
    line = _one_clear_line(run_command(prefix, "cogworker", *args))
    assert re.search(expected, line), line
    assert line.startswith("CommandError: ")


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"CONCURRENCY": 0}, r"COGWORKER\['CONCURRENCY'\] = 0 is invalid"),
        ({"FETCH": "fast"}, r"COGWORKER\['FETCH'\] = 'fast' is invalid"),
        ({"QUEUES": "default"}, r"COGWORKER\['QUEUES'\]"),
        ({"NO_SUCH_KEY": 1}, r"unknown key\(s\) 'NO_SUCH_KEY'"),
    ],
)
def test_bad_settings_exit_with_one_line(prefix, settings, expected):
    line = _one_clear_line(run_command(prefix, "cogworker", settings=settings))
    assert re.search(expected, line), line


def test_unknown_option_is_argparse_usage(prefix):
    result = run_command(prefix, "cogworker", "--no-such-option")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "unrecognized arguments: --no-such-option" in result.stderr


def test_startup_summary_line(worker, redis_server, prefix):
    """One line: version, identity, pid, concurrency, queues, fetch mode, Redis target
    with the password masked."""
    server = redis_server()
    # Set after start: the fixture's readiness probe does not authenticate.
    server.client().config_set("requirepass", "s3cret-pw")
    url = f"redis://:s3cret-pw@127.0.0.1:{server.port}/0"
    w = worker(
        redis_url=url,
        args=["-q", "critical:3", "-q", "default", "-q", "default", "-c", "3", "--tag", "web1"],
    )
    log = w.log()
    lines = [ln for ln in log.splitlines() if re.search(r"cogworker \S+ started", ln)]
    assert len(lines) == 1, log
    line = lines[0]
    assert f"cogworker {__version__} started" in line
    assert re.search(rf"identity=web1:[^:\s]+:{w.pid}:[0-9a-f]{{8}}\b", line), line
    assert f"pid={w.pid}" in line
    assert "concurrency=3" in line
    # Repeating a name adds weight: -q default twice is default:2.
    assert "queues=critical:3,default:2" in line
    assert "fetch=reliable" in line
    assert f"redis=redis://:***@127.0.0.1:{server.port}/0" in line
    assert "s3cret-pw" not in log
    assert w.stop() == 0


def test_logfile_option_writes_the_log(worker, tmp_path):
    path = tmp_path / "worker.log"
    w = worker(args=["--logfile", str(path)])
    assert w.stop() == 0
    text = path.read_text()
    assert re.search(r"cogworker \S+ started", text)
    assert "stopped" in text


def test_bad_logfile_exits_with_one_line(prefix, tmp_path):
    path = os.path.join(tmp_path, "no", "such", "dir", "w.log")
    line = _one_clear_line(run_command(prefix, "cogworker", "--logfile", path))
    assert "--logfile" in line and "can't be opened" in line


@pytest.mark.parametrize(
    "args, settings, redis_down, expected",
    [
        # settings before options, options before metrics, metrics before the logfile,
        # the logfile before the job modules, the job modules before Redis
        (["-c", "0"], {"FETCH": "fast"}, False, r"COGWORKER\['FETCH'\] = 'fast' is invalid"),
        (["--tag", "a b", "--metrics-port", "70000"], {}, False, r"--tag must not contain"),
        (["--metrics-port", "70000", "--logfile", "BAD"], {}, False, r"--metrics-port = 70000"),
        (["--logfile", "BAD"], {"JOB_MODULES": ["cw_not_there.jobs"]}, False, r"--logfile "),
        ([], {"JOB_MODULES": ["cw_not_there.jobs"]}, True, r"The job module cw_not_there\.jobs"),
    ],
)
def test_the_first_failing_start_check_is_the_one_reported(
    prefix, tmp_path, args, settings, redis_down, expected
):
    bad_logfile = os.path.join(tmp_path, "no", "such", "dir", "w.log")
    args = [bad_logfile if a == "BAD" else a for a in args]
    url = {"redis_url": f"redis://127.0.0.1:{free_port()}/0"} if redis_down else {}
    line = _one_clear_line(run_command(prefix, "cogworker", *args, settings=settings, **url))
    assert line.startswith("CommandError: "), line
    assert re.search(expected, line), line


# What the command says about its settings and its Redis before it runs -------------------------


@pytest.mark.parametrize("key", ["HEARTBEAT_INTERVAL", "TIMEOUT_GRACE"])
def test_a_worker_with_a_nan_timing_refuses_to_start_with_one_clear_line(worker, key):
    """HEARTBEAT_INTERVAL = nan killed the worker at boot with a traceback; TIMEOUT_GRACE
    = nan let it run and never abandon a stuck job. Both are refused before it starts."""
    w = worker(settings={key: math.nan}, wait=False)
    assert w.wait(60) != 0
    log = w.log()
    assert f"COGWORKER[{key!r}] = nan is invalid: expected a finite number" in log
    assert "Traceback" not in log


def test_the_worker_command_says_the_credentials_were_refused(redis_server, prefix):
    server = redis_server()
    server.client().config_set("requirepass", "s3cret-pw")  # after start: it pings without
    url_ = f"redis://:wrong-pw@127.0.0.1:{server.port}/0"
    result = run_command(prefix, "cogworker", redis_url=url_)
    assert result.returncode != 0
    assert "refused cogworker's credentials" in result.stderr, result.stderr
    assert "unreachable" not in result.stderr and "Traceback" not in result.stderr


def test_the_worker_logs_a_redis_that_keeps_nothing_on_disk_at_boot(worker, redis_server):
    """(cogworker.W004: tests/test_persistence.py.)"""
    server = redis_server()
    w = worker(redis_url=server.url)
    w.wait_for_log(r"keeps nothing on disk .*\(cogworker\.W004\)")
    assert w.stop() == 0


# A bad COGWORKER_PERIODIC entry (tests/periodic/test_periodic_entries.py) ----------------------


def test_the_worker_refuses_to_start_with_a_bad_entry(prefix):
    bad = {"nightly": {**GOOD, "timezone": "Nowhere/Land"}}
    result = run_command(
        prefix, "cogworker", env={"COGWORKER_PERIODIC_JSON": json.dumps(bad)}, timeout=30
    )
    assert result.returncode != 0
    assert "COGWORKER_PERIODIC['nightly']['timezone'] = 'Nowhere/Land' is invalid" in (
        result.stderr + result.stdout
    )


def test_the_worker_names_every_bad_entry(prefix):
    bad = {
        "first": {**GOOD, "timezone": "Nowhere/Land"},
        "fine": GOOD,
        "second": {**GOOD, "cron": "nope", "queue": "two words"},
    }
    result = run_command(
        prefix, "cogworker", env={"COGWORKER_PERIODIC_JSON": json.dumps(bad)}, timeout=30
    )
    output = result.stderr + result.stdout
    assert result.returncode != 0
    assert "COGWORKER_PERIODIC['first']['timezone']" in output
    assert "COGWORKER_PERIODIC['second']['cron']" in output
    assert "COGWORKER_PERIODIC['second']['queue']" in output
    assert "'fine'" not in output and "Traceback" not in output


def test_a_bad_entry_stops_check_and_the_worker_not_migrate(prefix, tmp_path):
    env = {
        "COGWORKER_PERIODIC_JSON": json.dumps({"e": {**GOOD, "job": "testapp.jobs.periodic_tik"}}),
        "TESTPROJECT_DB": str(tmp_path / "db.sqlite3"),
    }
    migrated = run_command(prefix, "migrate", "-v", "0", env=env)
    assert migrated.returncode == 0, migrated.stderr
    assert "cogworker.W101" in migrated.stderr and "did you mean" in migrated.stderr
    checked = run_command(prefix, "check", env=env)
    assert checked.returncode == 1 and "cogworker.E101" in checked.stderr
    worker = run_command(prefix, "cogworker", env=env)
    assert worker.returncode == 1 and "periodic_tik" in worker.stderr
