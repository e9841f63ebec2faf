"""A worker started before its Redis waits for it (one line, then one every 30 s) and
starts when Redis answers; TERM while it waits exits at once; ``check`` and the other
commands do not wait. Real processes, a private redis-server started late on its port,
the production timings (REDIS_WAIT_LOG_EVERY, 30 s)."""

from __future__ import annotations

import signal
import time

from cogworker_django.core import payload
from cogworker_django.management import waiting as command

from ..helpers import RedisServer, free_port, run_command, wait_until

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


def test_check_and_other_commands_do_not_wait(prefix):
    down = f"redis://127.0.0.1:{free_port()}/0"
    for args in (["check", "--deploy"], ["cogworker_status"]):
        started = time.monotonic()
        done = run_command(prefix, *args, redis_url=down, timeout=60)
        assert done.returncode != 0, (args, done.stdout, done.stderr)
        assert "unreachable" in done.stdout + done.stderr, (args, done.stdout, done.stderr)
        assert "waiting for it" not in done.stdout + done.stderr
        assert time.monotonic() - started < 20


def test_waits_for_only_an_outage():
    import redis

    assert command.waits_for(redis.ConnectionError("Connection refused"))
    assert command.waits_for(redis.BusyLoadingError("LOADING Redis is loading"))
    assert not command.waits_for(redis.AuthenticationError("invalid password"))
    assert not command.waits_for(redis.ResponseError("ERR DB index is out of range"))
    assert not command.waits_for(ValueError("bad"))
