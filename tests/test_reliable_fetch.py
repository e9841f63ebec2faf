"""Fetch mode selection, and what one job costs in Redis round trips on the hot path
(counted with MONITOR on a private redis-server: only commands sent by clients, not
those run inside scripts)."""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter

import pytest
from testapp import jobs as tj

from cogworker_django import scripts
from cogworker_django.worker.launcher import choose_fetch_mode

from .helpers import wait_until

# Reliable fetch behave the same on a Redis Cluster: every test runs on both
# (tests/cluster_support.py).
pytestmark = pytest.mark.cluster

# Decision (unit) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "requested, version, mode",
    [
        ("reliable", (7, 0, 15), "reliable"),
        ("reliable", (6, 2, 0), "reliable"),
        ("reliable", (6, 0, 20), "basic"),
        ("reliable", (5, 0, 7), "basic"),
        ("basic", (7, 2, 0), "basic"),
        ("basic", (), "basic"),
    ],
)
def test_choose_fetch_mode(requested, version, mode):
    assert choose_fetch_mode(requested, version)[0] == mode


def test_fallback_to_basic_says_why_and_what_is_lost():
    mode, warning = choose_fetch_mode("reliable", (6, 0, 9))
    assert mode == "basic"
    assert "needs Redis >= 6.2" in warning and "6.0.9" in warning
    assert "a job taken by a worker that dies is lost" in warning
    assert choose_fetch_mode("reliable", (6, 2, 1))[1] is None
    assert choose_fetch_mode("basic", (6, 0, 9))[1] is None  # asked for: no warning


# Real workers: which commands they send per job -----------------------------------------


class Monitor:
    """Counts the commands clients send to a server (MONITOR), by name, lowercased;
    commands run inside Lua scripts are left out. Leaving the block sends a marker
    (ECHO) and waits until the reader has seen it, so nothing still buffered is missed
    however far the reader lags. A reader that died (its exception is raised here) or
    never saw the marker fails the test: partial counts would pass upper bounds."""

    def __init__(self, server) -> None:
        self.server = server
        self.client = server.client()
        self.counts: Counter = Counter()
        self.scripts: Counter = Counter()
        self._marker = f"monitor-end-{secrets.token_hex(8)}"
        self._ready = threading.Event()
        self._saw_marker = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        assert self._ready.wait(5), self._error or "the MONITOR reader never started"
        return self

    def _run(self) -> None:
        try:
            with self.client.monitor() as m:
                self._ready.set()
                for cmd in m.listen():
                    if self._marker in cmd["command"]:
                        self._saw_marker = True
                        return
                    if cmd.get("client_type") == "lua":
                        continue
                    words = cmd["command"].split(" ", 2)
                    name = words[0].lower()
                    self.counts[name] += 1
                    if name == "evalsha" and len(words) > 1:
                        self.scripts[words[1]] += 1  # by script (its sha)
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread
            self._error = exc

    def __exit__(self, *exc) -> None:
        self.server.client().echo(self._marker)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the MONITOR reader never saw the marker"
        if self._error is not None:
            raise AssertionError(f"the MONITOR reader died: {self._error!r}") from self._error
        assert self._saw_marker, "the MONITOR reader stopped before the end marker"


def _drain_under_monitor(worker, server, prefix, args, n) -> tuple[Counter, float, Counter]:
    client = server.client()
    client.sadd(f"{prefix}:paused", "default")
    w = worker(redis_url=server.url, args=args, settings={"CONCURRENCY": 5})
    tj.noop.enqueue_many([() for _ in range(n)])
    time.sleep(0.3)
    with Monitor(server) as mon:
        started = time.monotonic()
        client.srem(f"{prefix}:paused", "default")
        wait_until(lambda: client.llen(f"{prefix}:queue:default") == 0, 60, 0.02, message="drain")
        took = time.monotonic() - started
        # The last jobs finish (and, reliable, ride their ack on a fetch): counted once
        # no in-progress list holds anything.
        wait_until(
            lambda: all(client.llen(k) == 0 for k in client.keys(f"{prefix}:inprogress:*")),
            30,
            0.02,
            message="the last acks",
        )
    assert w.stop() == 0
    return mon.counts, took, mon.scripts


def test_reliable_fetch_costs_one_round_trip_per_job(worker, redis_server, configure, prefix):
    server = redis_server()
    configure(REDIS_URL=server.url)
    n = 3000
    counts, took, by_script = _drain_under_monitor(worker, server, prefix, [], n)
    per_job = {k: v / n for k, v in counts.most_common()}
    fetches = by_script[scripts.get("fetch").sha] / n
    print(f"\nreliable: {n} jobs in {took:.2f}s; fetches per job {fetches:.3f}; {per_job}")
    # At most one fetch per job: acks and jobs share it (one call acks every job finished
    # since the last and takes one for each free thread, see worker/dispatch.py), plus the
    # few polls that find the queue empty at the end. The timers' scripts (history,
    # unsettled jobs, the key guard) are not per job: their count grows with the drain's
    # time, not with n.
    assert fetches <= 1.01, (fetches, per_job)
    # No separate ack: it rides on the next fetch (and the heartbeat never acks twice).
    assert "brpop" not in counts and "lrem" not in counts
    # Nothing else is paid per job: the heartbeat, poller and key guard run on timers
    # (how much they add per job depends on how long the drain took, not on n).
    mine = ("evalsha", "llen", "srem", "echo")  # llen and srem: this test's own
    assert all(v / n < 0.1 for k, v in counts.items() if k not in mine), counts


def test_basic_fetch_takes_without_an_in_progress_list_and_waits_in_brpop(
    worker, redis_server, configure, prefix
):
    """Basic fetch: one non-blocking script per job (it also sees django.tasks priority
    zsets, which BRPOP can't), and BRPOP only to wait while every queue is empty. No
    in-progress list, no in-progress registry."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    n = 3000
    counts, took, by_script = _drain_under_monitor(worker, server, prefix, ["--fetch", "basic"], n)
    per_job = {k: v / n for k, v in counts.most_common()}
    fetches = by_script[scripts.get("basic_fetch").sha] / n
    print(f"\nbasic: {n} jobs in {took:.2f}s; fetches per job {fetches:.3f}; {per_job}")
    # One script per job, and one per thread that finds the queue empty at the end.
    assert fetches <= 1.01, (fetches, per_job)
    assert "lrem" not in counts
    client = server.client()
    assert not client.keys(f"{prefix}:inprogress*")


@pytest.mark.parametrize("mode, blocking", [("basic", True), ("reliable", False)])
def test_idle_worker_waits_by_mode(worker, redis_server, configure, prefix, mode, blocking):
    server = redis_server()
    configure(REDIS_URL=server.url)
    w = worker(redis_url=server.url, args=["--fetch", mode], settings={"CONCURRENCY": 5})
    assert f"fetch={mode}" in w.log()
    time.sleep(0.5)
    with Monitor(server) as mon:
        time.sleep(2.0)
    if blocking:
        # Each thread blocks up to a second per BRPOP.
        assert 5 <= mon.counts["brpop"] <= 20, mon.counts
    else:
        # Reliable fetch polls (no blocking LMOVE: one script walks every queue), backing
        # off to FETCH_IDLE_MAX_INTERVAL (0.1 s in tests), from the feeder alone: about
        # 10 a second for the process, whatever its five threads (not 50).
        assert "brpop" not in mon.counts
        assert 5 <= mon.counts["evalsha"] <= 30, mon.counts
    assert w.stop() == 0


def test_threads_share_fetches_under_load(worker, redis_server, configure, prefix):
    """The dispatcher (worker/dispatch.py): with several threads busy, one fetch acks
    several finished jobs and takes several new ones, so a drain needs clearly fewer
    fetches than jobs. (A count of commands, not a timing.)"""
    server = redis_server()
    configure(REDIS_URL=server.url)
    n = 3000
    counts, _, by_script = _drain_under_monitor(worker, server, prefix, [], n)
    assert by_script[scripts.get("fetch").sha] < 0.9 * n, (by_script, counts)
