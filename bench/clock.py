"""The drain clock: start the workers, watch the system's own keys, stop the workers.

What "done" means (the same rule for every system, see README "What is measured"):
the system's pending queue is empty AND the structure in which it tracks jobs taken but
not yet acknowledged is empty, for the systems that have one (RQ's started registry,
Dramatiq's message hash, Celery's unacked hash, cogworker's in-progress lists under
reliable fetch). Systems without such a structure (Huey, cogworker basic fetch) can
still be running at most their concurrency's worth of jobs when the clock stops.

With ``--job incr`` (the default) each job does one Redis round trip, an INCR of its
system's done counter, and "done" is that counter reaching N: a real job does I/O, and
a job that touches nothing hides how long a worker takes to fetch its next one. With
``--job noop`` the jobs are true no-ops and "done" is read from each system's own keys
as above.

The watcher reads a few keys every POLL_SECONDS from the bench process; both ends of
the measured interval carry the same polling error (at most one interval).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.targets import DONE_KEY, BenchError, client_for, redacted, url_for
from bench.workers import WorkerGroup

# 5 ms: ~200 cheap reads a second, negligible next to thousands of jobs a second, and
# a resolution well under 1% of any drain of a few thousand jobs.
POLL_SECONDS = 0.005

Counter = Callable[[redis.Redis], int]


@dataclass(frozen=True, kw_only=True)
class Probe:
    """How to read one system's progress from its own Redis keys."""

    pending: Counter  # jobs waiting in the queue
    inflight: Counter | None = None  # jobs taken but not acknowledged (None: not visible)
    failed: Counter | None = None  # jobs the system filed as failed/dead/retrying
    # jobs of the I/O kind that counted themselves done (--job incr)
    done: Counter = lambda r: int(r.get(DONE_KEY) or 0)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One measured run: a system in one configuration."""

    system: str
    config: str  # human label, shown in the table
    params: dict  # system-specific knobs (fetch mode, worker class, ...)
    concurrency: int
    processes: int
    timeout: float
    log_dir: Path
    job: str = "incr"  # "incr": one INCR per job, done when counted; "noop": does nothing


@dataclass(kw_only=True)
class DrainResult:
    status: str  # "ok", "timeout" or "worker exited"
    startup_s: float | None  # worker start -> first job taken from the queue
    drain_s: float | None  # first job taken -> done
    wall_s: float  # worker start -> done (or give-up)
    remaining: int  # pending + visible in-flight jobs when the clock stopped
    failed: int | None
    stop_s: float
    killed: bool
    detail: str = ""


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    """The bench's environment plus the repo root on PYTHONPATH (peer task modules).

    Django and cogworker variables are dropped unless ``extra`` sets them: a peer that
    sees DJANGO_SETTINGS_MODULE turns Django-aware (Celery's Django fixup) and would
    import the test project.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "DJANGO_SETTINGS_MODULE" and not k.startswith("COGWORKER_")
    }
    root = str(repo_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def python() -> str:
    return sys.executable


def drain(
    n: int,
    spec: RunSpec,
    *,
    argv: Callable[[int], list[str]],
    env: dict[str, str],
    probe: Probe,
) -> DrainResult:
    """Start ``spec.processes`` workers (``argv(i)`` each) and time how long they take to
    drain the ``n`` jobs already enqueued."""
    client = client_for(spec.system)
    group = WorkerGroup(
        [argv(i) for i in range(spec.processes)],
        env=worker_env(env),
        cwd=repo_root(),
        log_dir=spec.log_dir,
    )
    client.ping()  # open the watcher's connection before the clock starts
    status, detail, remaining = "timeout", "", n
    first = done = None
    start = time.perf_counter()
    try:
        group.start()
        while True:
            now = time.perf_counter()
            pending = probe.pending(client)
            if first is None and pending < n:
                first = now
            if spec.job == "incr":
                counted = probe.done(client)
                if counted >= n:
                    done, status, remaining = now, "ok", 0
                    break
                remaining = n - counted
            elif pending == 0:
                inflight = probe.inflight(client) if probe.inflight else 0
                if inflight == 0:
                    done, status, remaining = now, "ok", 0
                    break
                remaining = inflight
            else:
                remaining = pending
            exited = group.exited()
            if exited:
                status, detail = "worker exited", exited
                break
            if now - start > spec.timeout:
                detail = f"gave up after {spec.timeout:.0f}s with {remaining} jobs left"
                break
            time.sleep(POLL_SECONDS)
        end = done if done is not None else time.perf_counter()
    finally:
        stop = group.stop()
    failed = probe.failed(client) if probe.failed else None
    client.close()
    return DrainResult(
        status=status,
        startup_s=None if first is None else first - start,
        drain_s=None if first is None or done is None else done - first,
        wall_s=end - start,
        remaining=remaining,
        failed=failed,
        stop_s=stop.seconds,
        killed=stop.killed,
        detail=detail,
    )


def check_enqueued(system: str, probe: Probe, n: int) -> None:
    """Every system must show exactly ``n`` pending jobs after its enqueue."""
    client = client_for(system)
    try:
        pending = probe.pending(client)
    finally:
        client.close()
    if pending != n:
        raise BenchError(
            f"enqueued {n} jobs but {pending} are pending in {redacted(url_for(system))}"
        )


def scan_llen(client: redis.Redis, pattern: str) -> int:
    """Total length of the lists whose names match ``pattern``."""
    keys = list(client.scan_iter(match=pattern, count=1000))
    if not keys:
        return 0
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.llen(key)
    return sum(pipe.execute())
