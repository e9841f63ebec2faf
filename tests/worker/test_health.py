"""Health probes: ``manage.py cogworker_status`` and ``/healthz`` on ``--metrics-port``,
with no worker, a live one and a frozen (SIGSTOPped) one, at the production heartbeat
(5 s: a probe fails after three missed beats, 15 s). Real processes."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
import urllib.error
import urllib.request

import pytest

from cogworker_django.conf import DEFAULTS
from cogworker_django.management.commands import cogworker_status

from ..helpers import FAST_SETTINGS, free_port, run_command, wait_until

PRODUCTION = {k: DEFAULTS[k] for k in FAST_SETTINGS if k != "RETRY_BACKOFF"}
HOST = socket.gethostname()


def status(prefix, *args, settings=None):
    done = run_command(prefix, "cogworker_status", *args, settings=settings, timeout=60)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and not done.stderr.strip(), (done.stdout, done.stderr)
    return done.returncode, lines[0]


def identity_of(w) -> str:
    return re.search(r"identity=(\S+)", w.log()).group(1)


def healthz(port, timeout=5.0):
    """(status code, body) of /healthz; (None, why) when nothing answers in time."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (OSError, TimeoutError) as exc:
        return None, str(exc)


def test_status_with_no_worker_fails_with_one_line(prefix):
    code, line = status(prefix)
    assert code == 1
    assert line == f"no worker process of host {HOST} is registered"
    code, line = status(prefix, "--identity", "nobody:1:abc")
    assert code == 1
    assert line.startswith("no worker process nobody:1:abc is registered")


def test_status_of_a_live_then_frozen_worker_at_the_production_heartbeat(worker, prefix):
    assert PRODUCTION["HEARTBEAT_INTERVAL"] == 5.0
    w = worker(settings=PRODUCTION)
    ident = identity_of(w)
    code, line = status(prefix, settings=PRODUCTION)
    assert code == 0, line
    assert re.fullmatch(rf"ok: {re.escape(ident)} beat \d+\.\d s ago \(max age 15 s\)", line)
    assert status(prefix, "--identity", ident, settings=PRODUCTION)[0] == 0
    w.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        # Three beats missed (15 s; it beat at most 5 s before the stop), and before its
        # presence expires (4 beats, 20 s): the probe fails saying so. (Asked in this
        # process, every 0.2 s: the command's own function, through the same api.)
        ok, line = wait_until(
            lambda: (answer := cogworker_status.status("", 15.0))[0] is False and answer,
            40,
            interval=0.2,
            message="the probe failed",
        )
        assert 10 <= time.monotonic() - stopped <= 20, time.monotonic() - stopped
        assert re.fullmatch(
            rf"a worker process of host {re.escape(HOST)} has not beaten within 15 s: the "
            rf"latest, {re.escape(ident)}, beat 1[5-9]\.\d s ago",
            line,
        ), line
        code, line = status(prefix, settings=PRODUCTION)
        assert code == 1, line
    finally:
        w.signal(signal.SIGCONT)
    wait_until(lambda: status(prefix, settings=PRODUCTION)[0] == 0, 30, message="ok again")


def test_status_refuses_a_bad_max_age(prefix):
    done = run_command(prefix, "cogworker_status", "--max-age", "0")
    assert done.returncode != 0
    assert "CommandError: --max-age must be a number of seconds > 0, got 0" in done.stderr


def test_status_says_when_the_freshest_process_is_recycling():
    from cogworker_django.api.processes import ProcessRecord

    record = ProcessRecord("h:1:a", {"recycling": "50 jobs started (--max-jobs 50)"}, beat=100.0)
    ok, line = cogworker_status.status_of([record], "h:1:a", 15.0, now=101.0)
    assert (
        ok
        and line
        == "ok: h:1:a beat 1.0 s ago (max age 15 s, recycling: 50 jobs started (--max-jobs 50))"
    )


def test_healthz_of_a_live_worker_and_of_one_cut_off_from_redis(worker, redis_server, prefix):
    server = redis_server()
    port = free_port()
    w = worker(redis_url=server.url, args=["--metrics-port", str(port)])
    code, body = healthz(port)
    assert code == 200 and body.startswith("ok: heartbeat "), body
    # Its beats fail while Redis is away: 503 after three beats (FAST_SETTINGS: 1.5 s).
    server.stop()
    wait_until(lambda: healthz(port)[0] == 503, 30, message="503")
    assert healthz(port)[1].startswith("no heartbeat for ")
    server.start()
    wait_until(lambda: healthz(port)[0] == 200, 30, message="200 again")
    assert w.stop() == 0


def test_healthz_of_a_frozen_process_does_not_answer(worker, prefix):
    port = free_port()
    w = worker(args=["--metrics-port", str(port)])
    assert healthz(port)[0] == 200
    w.signal(signal.SIGSTOP)
    try:
        code, why = healthz(port, timeout=2.0)
        assert code is None, why  # a probe's timeout: a failure
    finally:
        w.signal(signal.SIGCONT)
    wait_until(lambda: healthz(port)[0] == 200, 10, message="answers again")


def test_healthz_under_processes_fails_when_one_child_is_frozen(worker, prefix):
    port = free_port()
    w = worker(args=["--processes", "2", "--metrics-port", str(port)], settings=PRODUCTION)
    wait_until(lambda: len(w.children()) == 2, 30, message="two children")
    wait_until(lambda: healthz(port)[0] == 200, 30, message="200")
    assert healthz(port)[1].startswith("ok: 2 processes")
    frozen = w.children()[0]
    os.kill(frozen, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        wait_until(lambda: healthz(port)[0] == 503, 40, interval=0.5, message="503")
        assert 10 <= time.monotonic() - stopped <= 30
        assert healthz(port)[1].startswith(f"process {frozen}: no heartbeat for ")
    finally:
        os.kill(frozen, signal.SIGCONT)
    wait_until(lambda: healthz(port)[0] == 200, 30, message="200 again")
    assert w.stop() == 0


def test_healthz_is_not_behind_the_metrics_token(worker, prefix):
    port = free_port()
    worker(args=["--metrics-port", str(port)], settings={"METRICS_TOKEN": "s3cret"})
    assert healthz(port)[0] == 200
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert caught.value.code == 401
