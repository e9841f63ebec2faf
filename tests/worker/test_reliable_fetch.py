"""Fetch mode selection, and what one job costs in Redis round trips on the hot path
(counted with MONITOR on a private redis-server: only commands sent by clients, not
those run inside scripts)."""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from testapp import jobs as tj

from cogworker_django import conf
from cogworker_django.store import scripts
from cogworker_django.worker.launcher import choose_fetch_mode

from ..helpers import wait_until

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
    never saw the marker fails the test: partial counts would pass upper bounds.

    ``scripts`` counts every script call by the script's sha (EVALSHA, pipelined ones
    too), or under "eval" (EVAL sends the source; the package sends none). Commands from the client addresses in
    ``ignore`` (the test's own) are left out of both. ``lines`` keeps the whole text of
    every command that holds each of the ``watch`` strings, in the order Redis ran them
    (a command a client sent but Redis never ran is not there)."""

    def __init__(
        self, server, ignore: frozenset[str] = frozenset(), watch: tuple[str, ...] = ()
    ) -> None:
        self.server = server
        self.client = server.client()
        self.ignore = ignore
        self.watch = watch
        self.lines: list[str] = []
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
                    if f"{cmd.get('client_address')}:{cmd.get('client_port')}" in self.ignore:
                        continue
                    if self.watch and all(w in cmd["command"] for w in self.watch):
                        self.lines.append(cmd["command"])
                    words = cmd["command"].split(" ", 2)
                    name = words[0].lower()
                    self.counts[name] += 1
                    if name == "evalsha" and len(words) > 1:
                        self.scripts[words[1]] += 1  # by script (its sha)
                    elif name == "eval":
                        self.scripts["eval"] += 1
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread
            self._error = exc

    def __exit__(self, *exc) -> None:
        self.server.client().echo(self._marker)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the MONITOR reader never saw the marker"
        if self._error is not None:
            raise AssertionError(f"the MONITOR reader died: {self._error!r}") from self._error
        assert self._saw_marker, "the MONITOR reader stopped before the end marker"


# The worker's timers, run at their production defaults while a drain is counted.
TIMERS = (
    "HEARTBEAT_INTERVAL",
    "POLL_INTERVAL",
    "ORPHAN_CHECK_INTERVAL",
    "KEYGUARD_INTERVAL",
    "PERIODIC_TICK",
    "FETCH_IDLE_MAX_INTERVAL",
)


def _drain_under_monitor(inworker, server, prefix, fetch, n) -> tuple[Counter, float, Counter]:
    """Drain ``n`` noop jobs with one worker of CONCURRENCY 5 under MONITOR: the commands
    the worker sent, by name, and its script calls, by script (the test's own commands
    are left out: they go through one connection whose address is ignored)."""
    client = redis.Redis(port=server.port, decode_responses=True, single_connection_client=True)
    mine = frozenset({client.client_info()["addr"]})
    client.sadd(f"{prefix}:paused", "default")
    # The timers at their production defaults: what they send over the drain is then a
    # few dozen commands, however long a loaded machine makes the drain, against the n
    # that one command per job would add.
    timers = {name: conf.DEFAULTS[name] for name in TIMERS}
    w = inworker(fetch=fetch, concurrency=5, settings={"REDIS_URL": server.url, **timers})
    tj.noop.enqueue_many([() for _ in range(n)])
    time.sleep(0.3)
    with Monitor(server, ignore=mine) as mon:
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
    w.stop()
    assert int(client.get(f"{prefix}:stat:processed") or 0) == n  # flushed at the stop
    # Every job kept its outcome (JOB_RESULT_TTL's default), within the counts above.
    assert sum(1 for _ in client.scan_iter(f"{prefix}:result:*", count=1000)) == n
    client.close()
    return mon.counts, took, mon.scripts


def _by_name(by_script: Counter) -> dict[str, int]:
    """Script calls by the script's name (for messages)."""
    lua = Path(scripts.__file__).parent / "lua"
    names = {scripts.get(p.stem).sha: p.stem for p in lua.glob("*.lua")}
    return {names.get(sha, sha): v for sha, v in by_script.items()}


def test_reliable_fetch_costs_one_round_trip_per_job(redis_server, inworker, configure, prefix):
    server = redis_server()
    configure(REDIS_URL=server.url)
    n = 3000
    counts, took, by_script = _drain_under_monitor(inworker, server, prefix, "reliable", n)
    per_job = {k: v / n for k, v in counts.most_common()}
    fetch_calls = by_script[scripts.get("fetch").sha]
    fetches = fetch_calls / n
    print(f"\nreliable: {n} jobs in {took:.2f}s; fetches per job {fetches:.3f}; {per_job}")
    print(f"scripts: {_by_name(by_script)}")
    # The jobs came through the fetch script: one call takes at most one job per thread
    # (CONCURRENCY 5), so n jobs took at least n / 5 calls.
    assert fetch_calls >= n / 5, (_by_name(by_script), per_job)
    # At most one fetch per job: acks and jobs share it (one call acks every job finished
    # since the last and takes one for each free thread, see worker/dispatch.py), plus the
    # few polls that find the queue empty at the end.
    assert fetches <= 1.01, (fetches, per_job)
    # No separate ack: it rides on the next fetch (and the heartbeat never acks twice);
    # no BRPOP but the idle feeder's wait on the doorbells once the queue ran dry.
    assert counts.get("brpop", 0) <= 3 and "lrem" not in counts, counts
    # Nothing else is paid per job, script or command: the heartbeat, the poller, the
    # history and stats flushes and the key guard run on timers (what they add per job
    # depends on how long the drain took, not on n: a few dozen at production timings;
    # the history, one script per 100 runs).
    other_scripts = sum(by_script.values()) - fetch_calls
    assert other_scripts < 0.05 * n, _by_name(by_script)
    other_commands = sum(counts.values()) - fetch_calls
    assert other_commands < 0.1 * n, counts


def test_basic_fetch_takes_without_an_in_progress_list_and_waits_in_brpop(
    redis_server, inworker, configure, prefix
):
    """Basic fetch: one non-blocking script per job (it also sees django.tasks priority
    zsets, which BRPOP can't), and BRPOP only to wait while every queue is empty. No
    in-progress list, no in-progress registry."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    n = 3000
    counts, took, by_script = _drain_under_monitor(inworker, server, prefix, "basic", n)
    per_job = {k: v / n for k, v in counts.most_common()}
    fetch_calls = by_script[scripts.get("basic_fetch").sha]
    fetches = fetch_calls / n
    print(f"\nbasic: {n} jobs in {took:.2f}s; fetches per job {fetches:.3f}; {per_job}")
    print(f"scripts: {_by_name(by_script)}")
    # One script per job (each takes one job: every job came through one, BRPOP only
    # waits once the queue is empty), and one per thread that finds the queue empty at
    # the end.
    assert n <= fetch_calls <= 1.01 * n, (fetches, per_job)
    assert "lrem" not in counts
    # Nothing else per job: the timers' scripts and commands (BRPOP: a thread's wait
    # once the queue ran dry).
    assert sum(by_script.values()) - fetch_calls < 0.05 * n, _by_name(by_script)
    assert sum(counts.values()) - fetch_calls < 0.1 * n, counts
    client = server.client()
    assert not client.keys(f"{prefix}:inprogress*")


@pytest.mark.parametrize("mode, blocking", [("basic", True), ("reliable", False)])
def test_idle_worker_waits_by_mode(
    redis_server, inworker, worker_log, configure, prefix, mode, blocking
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    w = inworker(fetch=mode, concurrency=5)
    assert f"fetch={mode}" in worker_log.log()
    time.sleep(0.5)
    with Monitor(server) as mon:
        time.sleep(2.0)
    if blocking:
        # Each thread blocks up to a second per BRPOP.
        assert 5 <= mon.counts["brpop"] <= 20, mon.counts
    else:
        # Reliable fetch: the feeder alone waits, in a BRPOP on the queues' doorbells up
        # to FETCH_IDLE_MAX_INTERVAL (0.1 s in tests), then fetches: about 10 of each a
        # second for the process, whatever its five threads (not 50).
        # (Counted by the fetch script's SHA: the beat's stamp goes by EVALSHA too.)
        assert 5 <= mon.counts["brpop"] <= 30, mon.counts
        assert 5 <= mon.scripts[scripts.get("fetch").sha] <= 30, _by_name(mon.scripts)
    w.stop()


def test_threads_share_fetches_under_load(redis_server, inworker, configure, prefix):
    """The dispatcher (worker/dispatch.py): with several threads busy, one fetch acks
    several finished jobs and takes several new ones, so a drain needs clearly fewer
    fetches than jobs. (A count of commands, not a timing.)"""
    server = redis_server()
    configure(REDIS_URL=server.url)
    n = 3000
    counts, _, by_script = _drain_under_monitor(inworker, server, prefix, "reliable", n)
    fetch_calls = by_script[scripts.get("fetch").sha]
    # Seen at all, and each call took at most one job per thread (CONCURRENCY 5).
    assert n / 5 <= fetch_calls < 0.9 * n, (_by_name(by_script), counts)
