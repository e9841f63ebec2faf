"""Huey with RedisHuey: ``huey_consumer -w C -k thread``, one process with C worker threads.

Each thread pops one message (BRPOP) and runs it; there is no ack and no in-flight
record, so when the queue is empty up to C jobs may still be running (not counted).
Periodic-task scheduling is turned off (``-n``): there are no periodic tasks to run.

Huey's bulk call ``task.map()`` is one LPUSH per job (no pipeline).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.metadata import version as _dist_version

from bench.clock import DrainResult, Probe, RunSpec, python
from bench.clock import drain as _drain
from bench.targets import QUEUE

NAME = "huey"

_QUEUE_KEY = f"huey.redis.{QUEUE}"

PROBE = Probe(pending=lambda r: r.llen(_QUEUE_KEY))


def probe(spec: RunSpec) -> Probe:
    return PROBE


def version() -> str:
    import huey  # noqa: F401 - ImportError means "not installed"

    return _dist_version("huey")


def configs(opts) -> list[tuple[str, str, dict]]:
    return [("", f"{opts.concurrency} threads, pop without ack", {})]


def enqueue(n: int, spec: RunSpec) -> float:
    from bench.peer_tasks import huey_tasks

    task = getattr(huey_tasks, spec.job)
    huey_tasks.huey.storage.conn.ping()
    args = [() for _ in range(n)]
    start = time.perf_counter()
    task.map(args)
    return time.perf_counter() - start


def worker_argv(spec: RunSpec) -> Callable[[int], list[str]]:
    """The command line of worker process ``i`` (drain and bench/trickle.py)."""

    def argv(i: int) -> list[str]:
        return [
            python(), "-m", "huey.bin.huey_consumer", "bench.peer_tasks.huey_tasks.huey",
            "--workers", str(spec.concurrency),
            "--worker-type", "thread",
            "--no-periodic",
            "--quiet",
        ]  # fmt: skip

    return argv


def worker_env() -> dict[str, str]:
    """What its workers' environment adds."""
    return {}


def stamp_pusher(spec: RunSpec) -> Callable[[str], None]:
    """Pushes one trickle job (bench/trickle.py): calling the task."""
    from bench.peer_tasks import huey_tasks

    huey_tasks.huey.storage.conn.ping()
    return lambda token: huey_tasks.stamp(token) and None


def drain(n: int, spec: RunSpec) -> DrainResult:
    return _drain(n, spec, argv=worker_argv(spec), env=worker_env(), probe=PROBE)
