"""Dramatiq with its Redis broker: ``dramatiq --processes 1 --threads C``.

The ``dramatiq`` command is a supervisor that forks the one worker process; jobs run in
that process's C threads. The consumer prefetches up to 2*C messages (Dramatiq's
default) into an acks set; a message leaves ``<queue>.msgs`` only when acked after it
ran, so "done" here is exact.

Dramatiq has no bulk enqueue: each ``send()`` is one EVALSHA of its dispatch script.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.metadata import version as _dist_version

from bench.clock import DrainResult, Probe, RunSpec, python
from bench.clock import drain as _drain
from bench.targets import QUEUE

NAME = "dramatiq"

# Namespace "dramatiq" (the broker's default).
_QUEUE_KEY = f"dramatiq:{QUEUE}"
_MESSAGES_KEY = f"{_QUEUE_KEY}.msgs"  # id -> message, until acked
_DEAD_KEY = f"{_QUEUE_KEY}.XQ"

PROBE = Probe(
    pending=lambda r: r.llen(_QUEUE_KEY),
    # Read only once the queue is empty: then every message left in the hash is unacked.
    inflight=lambda r: r.hlen(_MESSAGES_KEY),
    failed=lambda r: r.zcard(_DEAD_KEY),
)


def probe(spec: RunSpec) -> Probe:
    return PROBE


def version() -> str:
    import dramatiq.brokers.redis  # noqa: F401 - ImportError means "not installed"

    return _dist_version("dramatiq")


def configs(opts) -> list[tuple[str, str, dict]]:
    c = opts.concurrency
    return [("", f"{c} threads, prefetch {2 * c} (+ idle supervisor process)", {})]


def enqueue(n: int, spec: RunSpec) -> float:
    from bench.peer_tasks import dramatiq_tasks

    actor = getattr(dramatiq_tasks, spec.job)
    dramatiq_tasks.broker.client.ping()
    start = time.perf_counter()
    for _ in range(n):
        actor.send()
    return time.perf_counter() - start


def worker_argv(spec: RunSpec) -> Callable[[int], list[str]]:
    """The command line of worker process ``i`` (drain and bench/trickle.py)."""

    def argv(i: int) -> list[str]:
        return [
            python(), "-m", "dramatiq", "bench.peer_tasks.dramatiq_tasks",
            "--processes", "1",
            "--threads", str(spec.concurrency),
            "--queues", QUEUE,
        ]  # fmt: skip

    return argv


def worker_env() -> dict[str, str]:
    """What its workers' environment adds."""
    return {}


def stamp_pusher(spec: RunSpec) -> Callable[[str], None]:
    """Pushes one trickle job (bench/trickle.py): ``actor.send``."""
    from bench.peer_tasks import dramatiq_tasks

    dramatiq_tasks.broker.client.ping()
    return lambda token: dramatiq_tasks.stamp.send(token) and None


def drain(n: int, spec: RunSpec) -> DrainResult:
    return _drain(n, spec, argv=worker_argv(spec), env=worker_env(), probe=PROBE)
