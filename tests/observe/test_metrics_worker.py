"""A real worker with ``--metrics-port``: /metrics after a known number of runs,
successes, retries and dead jobs (parsed with prometheus_client's parser), the token,
``--processes 2`` through one port with its multiprocess directory removed at stop, and
the clear exits of a bad port."""

from __future__ import annotations

import os
import re
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from testapp import jobs as tj

from cogworker_django.observe import telemetry

from ..helpers import free_port, run_command, wait_until


def fetch(port: int, token: str | None = None, path: str = "/metrics") -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(port: int, token: str | None = None) -> dict[tuple[str, tuple], float]:
    status, body = fetch(port, token)
    assert status == 200, body
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def runs(m: dict, job: str, outcome: str, queue: str = "work") -> float:
    key = ("cogworker_jobs_total", (("job", job), ("outcome", outcome), ("queue", queue)))
    return m.get(key, 0)


def start(worker, *args: str, settings: dict | None = None):
    port = free_port()
    w = worker(
        args=["-q", "work", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1", *args],
        settings={"CONCURRENCY": 3, **(settings or {})},
    )
    w.wait_for_log(rf"metrics served on http://127\.0\.0\.1:{port}/metrics")
    return w, port


def enqueue_known_runs() -> None:
    for _ in range(4):
        tj.noop.using(queue="work").enqueue()
    tj.fails_once_dead.using(queue="work").enqueue()  # retry=False: dead at once
    tj.always_fails.using(queue="work", retry=1).enqueue()  # one retry, then dead


NOOP, DEAD_AT_ONCE, FAILS = (
    "testapp.jobs.noop",
    "testapp.jobs.fails_once_dead",
    "testapp.jobs.always_fails",
)


def check_known_runs(m: dict) -> None:
    assert runs(m, NOOP, "success") == 4
    assert runs(m, DEAD_AT_ONCE, "dead") == 1
    assert runs(m, FAILS, "retry") == 1
    assert runs(m, FAILS, "dead") == 1
    assert runs(m, NOOP, "retry") == runs(m, NOOP, "dead") == 0
    duration_count = sum(
        v for (name, _), v in m.items() if name == "cogworker_job_duration_seconds_count"
    )
    assert duration_count == 7
    assert m[("cogworker_job_wait_seconds_count", (("queue", "work"),))] == 7


def test_a_worker_serves_its_runs(worker):
    w, port = start(worker)
    enqueue_known_runs()

    def all_counted():
        m = samples(port)
        return m if runs(m, FAILS, "dead") == 1 and runs(m, NOOP, "success") == 4 else None

    m = wait_until(all_counted, 30, interval=0.2, message="seven runs counted")
    check_known_runs(m)
    assert m[("cogworker_worker_threads", ())] == 3
    assert m[("cogworker_worker_busy_threads", ())] == 0
    assert m[("cogworker_fetch_round_trips_total", (("fetch", "reliable"),))] > 0
    assert m[("cogworker_fetch_round_trips_total", (("fetch", "basic"),))] == 0
    # The process's own metrics come with it (the default registry).
    assert ("process_resident_memory_bytes", ()) in m
    assert fetch(port, path="/elsewhere")[0] == 404
    assert w.stop() == 0


def test_busy_threads_while_a_job_runs(worker):
    w, port = start(worker)
    tj.slow.using(queue="work").enqueue(30, "busy")
    wait_until(
        lambda: samples(port)[("cogworker_worker_busy_threads", ())] == 1,
        20,
        interval=0.2,
        message="one busy thread",
    )
    w.kill()


def test_basic_fetch_round_trips(worker):
    w, port = start(worker, "--fetch", "basic")
    tj.noop.using(queue="work").enqueue()
    m = wait_until(
        lambda: (m := samples(port)) and runs(m, NOOP, "success") == 1 and m,
        20,
        interval=0.2,
        message="the run counted",
    )
    assert m[("cogworker_fetch_round_trips_total", (("fetch", "basic"),))] >= 1
    w.stop()


def test_the_token_guards_the_worker_endpoint(worker):
    w, port = start(worker, settings={"METRICS_TOKEN": "w0rker-token"})
    status, _ = fetch(port)
    assert status == 401
    assert fetch(port, "other")[0] == 403
    assert ("cogworker_worker_threads", ()) in samples(port, "w0rker-token")
    w.stop()


def test_processes_share_one_port(worker):
    w, port = start(worker, "--processes", "2")
    match = re.search(r"metrics of \d+ processes from (\S+)", w.log())
    assert match, w.log()
    directory = match.group(1)
    assert os.path.isdir(directory)
    enqueue_known_runs()

    def all_counted():
        m = samples(port)
        return m if runs(m, FAILS, "dead") == 1 and runs(m, NOOP, "success") == 4 else None

    m = wait_until(all_counted, 30, interval=0.2, message="seven runs counted")
    check_known_runs(m)
    assert m[("cogworker_worker_threads", ())] == 6  # 3 threads in each of 2 processes
    w.wait_for_log(r"cogworker \S+ started", count=2)
    assert w.stop() == 0
    assert not os.path.exists(directory)


def test_bad_port_exits_with_one_line(prefix):
    result = run_command(prefix, "cogworker", "--metrics-port", "70000")
    out = (result.stdout + result.stderr).strip()
    assert result.returncode != 0 and "Traceback" not in out, out
    assert "--metrics-port = 70000 is invalid" in out


def test_a_port_in_use_exits_with_one_line(prefix):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_command(
            prefix, "cogworker", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"
        )
    out = (result.stdout + result.stderr).strip()
    assert result.returncode != 0 and "Traceback" not in out, out
    assert f"--metrics-port {port}: can't listen on 127.0.0.1:{port}" in out


@pytest.mark.parametrize(
    "outcome, job",
    [
        ("dead", {"retry_count": 0, "retry": False}),
        ("dead", {"retry_count": 2, "retry": 2}),
        ("retry", {"retry_count": 1, "retry": 2}),
        ("retry", {"retry_count": 0}),
        ("retry", {"retry_count": "garbage", "retry": 3}),
    ],
)
def test_failed_outcome_follows_the_retry_policy(outcome, job):
    assert telemetry.failed_outcome(job, ValueError()) == outcome


def test_registered_outcomes():
    class Expired(Exception):
        pass

    telemetry.register_outcome(Expired, "expired")
    try:
        assert telemetry.failed_outcome({}, Expired()) == "expired"
        with pytest.raises(ValueError):
            telemetry.register_outcome(Expired, "vanished")
    finally:
        telemetry._outcomes().pop(Expired, None)
