"""``manage.py cogworker``'s output and exit codes: bad options and bad settings exit
non-zero with one clear line (no traceback), a NaN timing and refused Redis credentials
included; a good start logs one summary line, and a warning for a Redis that keeps
nothing on disk. The system checks' errors stop the command too; the LOGGING recipe's
JSON lines are its output; the start line names the reply parser (hiredis, or Python's
in a process without it, which runs everything the same); the job modules it imports
(an app's tasks.py, JOB_MODULES) and the one that fails to import, named. An
unreachable Redis is waited for, saying so every 30 s; TERM or INT while it waits exits
at once.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time

import pytest
from testapp import jobs as tj

from cogworker_django import __version__, checks
from cogworker_django.core import payload
from cogworker_django.management import waiting as command
from cogworker_django.store import keys

from ..api_support import make_job, push
from ..core.test_job_modules import (  # noqa: F401 - a fixture
    TASKS_MODULE,
    extra_module_fixture,
)
from ..helpers import MAIN_REDIS_URL, RedisServer, free_port, run_command, wait_until
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


# The system checks' errors as the command's exit code and output (the checks themselves:
# tests/test_checks.py).


def test_a_database_index_the_server_lacks_is_named_not_unreachable(prefix):
    url = MAIN_REDIS_URL.rsplit("/", 1)[0] + "/99"
    done = run_command(prefix, "check", "--deploy", "--tag", checks.REDIS_TAG, redis_url=url)
    assert done.returncode == 1
    assert "has no such database: ResponseError: DB index is out of range" in done.stderr
    assert "unreachable" not in done.stderr
    worker = run_command(prefix, "cogworker", redis_url=url)
    assert worker.returncode == 1 and "has no such database" in worker.stderr


def test_the_worker_logs_the_redis_warnings_at_boot(worker, redis_server):
    server = redis_server(extra=["--maxmemory-policy", "allkeys-lru"])
    w = worker(redis_url=server.url)
    w.wait_for_log(r"maxmemory-policy 'allkeys-lru'.*\(cogworker\.W002\)")


def test_unfit_redis_options_fail_check_and_the_worker(prefix):
    bad = {"REDIS_OPTIONS": {"socket_timeout": 0.5}}
    done = run_command(prefix, "check", settings=bad)
    assert done.returncode != 0
    assert "COGWORKER['REDIS_OPTIONS']['socket_timeout'] = 0.5 is invalid" in done.stderr
    url = MAIN_REDIS_URL + "?retry_on_timeout=true"
    worker = run_command(prefix, "cogworker", redis_url=url, timeout=60)
    assert worker.returncode != 0
    assert "CommandError: COGWORKER['REDIS_URL'] sets retry_on_timeout=true" in worker.stderr


@pytest.mark.parametrize(
    "path,fragment",
    [
        ("testapp.no_such_module.backoff", "can't be imported"),
        ("testapp.jobs.__name__", "is not callable"),
        ("testapp.jobs.timeline_key", "can't be called with one argument"),
    ],
)
def test_a_bad_retry_backoff_fails_check_and_the_worker_refuses_to_boot(prefix, path, fragment):
    settings = {"RETRY_BACKOFF": path}
    done = run_command(prefix, "check", settings=settings)
    assert done.returncode == 1
    assert "cogworker.E004" in done.stderr and fragment in done.stderr
    worker = run_command(prefix, "cogworker", settings=settings, timeout=60)
    assert worker.returncode != 0
    lines = worker.stderr.strip().splitlines()
    assert lines[-1].startswith(f"CommandError: COGWORKER['RETRY_BACKOFF'] = {path!r} ")
    assert fragment in lines[-1]
    assert "Traceback" not in worker.stderr


# redis-py's reply parser: hiredis (its C parser, a dependency) when importable, redis-py's
# own Python parser otherwise. Everything the worker reads from Redis (fetch replies, the
# heartbeat's pipeline, settle and history scripts, the hand-over) goes through whichever
# one the process has: a real worker with hiredis made unimportable runs, fails, retries,
# records and hands over exactly as the default one does.


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


# The LOGGING recipe of docs/observability.md (JSON lines with jid/job/queue on every line
# a run produces) as the command's output (the filter and formatter alone:
# tests/observe/test_logs.py).


def test_the_recipe_in_a_real_worker(worker):
    w = worker(args=["-q", "work"], env={"TESTPROJECT_JSON_LOGS": "1"})
    ok = tj.logs_lines.using(queue="work").enqueue("first")
    bad = tj.logs_lines.using(queue="work", retry=False).enqueue("second", fail=True)
    w.wait_for_log(r"working on second")
    w.wait_for_log(r"went wrong")
    w.stop()
    lines = [json.loads(line) for line in w.log().splitlines() if line.startswith("{")]
    assert lines, w.log()
    by_message = {line["message"]: line for line in lines}
    first = by_message["working on first"]
    assert (first["jid"], first["job"], first["queue"]) == (ok, "testapp.jobs.logs_lines", "work")
    assert first["logger"] == "testapp.work"
    second = by_message["working on second"]
    assert second["jid"] == bad
    # The worker's own line about the failed run carries the run too.
    (failed,) = [line for line in lines if "went wrong" in line["message"]]
    assert failed["jid"] == bad and failed["logger"] == "cogworker_django"
    assert failed["level"] == "WARNING"
    # Lines outside a run have no job fields (the start-up line, say).
    started = next(line for line in lines if line["message"].startswith("cogworker "))
    assert "jid" not in started


# Where the command finds jobs: the jobs.py and tasks.py modules of installed apps (a
# project with other apps: a second settings), COGWORKER["JOB_MODULES"], and a job module
# that fails to import: named, with its file; the cause under --traceback (the checks:
# tests/core/test_job_modules.py).


@pytest.fixture
def tasks_app(tmp_path):
    """An installed app whose only job module is tasks.py (the Celery habit)."""
    app = tmp_path / "cwtasksapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text(TASKS_MODULE)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, "TESTPROJECT_EXTRA_APPS": "cwtasksapp"}


def test_a_job_in_an_apps_tasks_module_runs_on_a_worker(worker, r, prefix, tasks_app):
    push(r, make_job("cwtasksapp.tasks.mark", "from-tasks"))
    w = worker(env=tasks_app)
    wait_until(lambda: r.hget(f"{prefix}:test:runs", "from-tasks"), 15, message="job ran")
    assert r.zcard(keys.dead(keys.home_of("default"))) == 0
    assert w.stop() == 0


def test_a_module_in_job_modules_runs_on_a_worker_which_lists_it_at_v2(
    worker, r, prefix, extra_module
):
    push(r, make_job("cw_extra_jobs.mark", "from-extra"))
    w = worker(env=extra_module, settings={"JOB_MODULES": ["cw_extra_jobs"]}, args=["-v", "2"])
    wait_until(lambda: r.hget(f"{prefix}:test:runs", "from-extra"), 15, message="job ran")
    w.wait_for_log(r"job modules: .*testapp\.jobs.*cw_extra_jobs")
    w.wait_for_log(r"registered jobs: .*cw_extra_jobs\.mark.*testapp\.jobs\.record")
    assert w.stop() == 0
    quiet = worker(env=extra_module)  # at the default verbosity: not listed
    assert quiet.stop() == 0 and "registered jobs" not in quiet.log()


@pytest.fixture
def broken_jobs_app(tmp_path):
    app = tmp_path / "cwbrokenjobs"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "jobs.py").write_text("from cogworker_django import job\nimport cw_no_such_module\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, "TESTPROJECT_EXTRA_APPS": "cwbrokenjobs"}, app / "jobs.py"


def test_a_jobs_module_that_fails_names_the_module_and_its_file(prefix, broken_jobs_app):
    env, path = broken_jobs_app
    done = run_command(prefix, "cogworker", env=env)
    assert done.returncode == 1
    assert (
        f"The job module cwbrokenjobs.jobs could not be imported ({path}, line 2): "
        "ModuleNotFoundError: No module named 'cw_no_such_module'"
    ) in done.stderr
    assert "Traceback" not in done.stderr
    traced = run_command(prefix, "cogworker", "--traceback", env=env)
    assert traced.returncode == 1
    assert "import cw_no_such_module" in traced.stderr  # the cause's own traceback
    checked = run_command(prefix, "check", env=env)
    assert "cogworker.E006" in checked.stderr and "cwbrokenjobs.jobs" in checked.stderr


def test_a_listed_module_that_is_missing_is_named(prefix):
    done = run_command(prefix, "cogworker", settings={"JOB_MODULES": ["cw_not_there.jobs"]})
    assert done.returncode == 1
    assert (
        "The job module cw_not_there.jobs (COGWORKER['JOB_MODULES']) could not be imported "
        "(not found): ModuleNotFoundError"
    ) in done.stderr


# A worker started before its Redis waits for it (one line, then one every 30 s) and
# starts when Redis answers; TERM or INT while it waits exits at once; refused
# credentials are not waited for. A private redis-server started late on its port, the
# production timings (REDIS_WAIT_LOG_EVERY, 30 s).


WAITING = r"is unreachable \(.*\): waiting for it"


def test_a_worker_started_10s_before_its_redis_runs_jobs_once_it_is_up(worker, prefix):
    server = RedisServer(port=free_port())  # its port chosen, not started yet
    try:
        w = worker(redis_url=server.url, wait=False)
        w.wait_for_log(WAITING, timeout=30)
        started = time.monotonic()
        assert w.proc.poll() is None
        time.sleep(10)
        assert w.proc.poll() is None  # still waiting, not exited
        assert "cogworker " not in w.log().split("waiting for it", 1)[1]  # not started
        server.start()
        w.wait_for_log(r"Redis at \S+ answered after \d+ s: starting", timeout=30)
        w.wait_for_log(r"cogworker \S+ started", timeout=30)
        r = server.client()
        job = payload.build("testapp.jobs.record", ["late"], queue="default")
        r.lpush(f"{prefix}:queue:default", payload.encode(job))
        wait_until(lambda: r.hget(f"{prefix}:test:runs", "late") == "1", 30, message="ran")
        log = w.log()
        # One line while it waited (it waited less than 30 s: no second one).
        assert len([line for line in log.splitlines() if "waiting for it" in line]) == 1, log
        assert "still waiting" not in log
        assert time.monotonic() - started >= 10
        assert w.stop() == 0
    finally:
        server.cleanup()


def test_term_while_waiting_exits_at_once_after_saying_so_every_30s(worker, prefix):
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    w = worker(redis_url=url, wait=False, settings={"REDIS_OPTIONS": {}})
    w.wait_for_log(WAITING, timeout=30)
    first = time.monotonic()
    # REDIS_WAIT_LOG_EVERY at its production value: the second line comes 30 s later.
    assert command.REDIS_WAIT_LOG_EVERY == 30.0
    w.wait_for_log(r"still waiting for Redis at \S+ \(3\d s\)", timeout=45)
    assert 29 <= time.monotonic() - first <= 40
    log = w.log()
    assert len([line for line in log.splitlines() if "waiting for" in line]) == 2, log
    assert "hunter2" not in log and "redis://:***@127.0.0.1" in log
    sent = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(10) == 0
    assert time.monotonic() - sent < 2.0, "TERM while waiting exits at once"
    assert "SIGTERM received while waiting for Redis: exiting" in w.log()
    assert "Traceback" not in w.log()


def test_int_while_waiting_exits_at_once_under_processes_too(worker):
    w = worker(
        redis_url=f"redis://127.0.0.1:{free_port()}/0", wait=False, args=["--processes", "2"]
    )
    w.wait_for_log(WAITING, timeout=30)
    assert w.children() == []  # the supervisor waits before it forks
    sent = time.monotonic()
    w.signal(signal.SIGINT)
    assert w.wait(10) == 0
    assert time.monotonic() - sent < 2.0


def test_refused_credentials_are_not_waited_for(prefix, redis_server):
    server = redis_server()
    server.client().config_set("requirepass", "right-pw")
    url = f"redis://:wrong-pw@127.0.0.1:{server.port}/0"
    done = run_command(prefix, "cogworker", redis_url=url, timeout=30)
    assert done.returncode != 0
    assert "refused cogworker's credentials" in done.stderr
    assert "waiting for it" not in done.stderr
