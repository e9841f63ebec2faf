"""Celery with the Redis broker: ``celery worker -P threads -c C``.

Why the threads pool: it is one process running C jobs at once, the same shape as a
cogworker process with C threads. ``-P prefork -c 1`` would run one job at a time in a
child process (two processes, concurrency 1), and ``-P prefork -c C`` is C+1 processes:
neither is "one worker process".

Defaults otherwise: early acks (a message is acked when a thread takes it), prefetch
multiplier 4 (up to 4*C messages reserved in the ``unacked`` hash), no result backend.
Gossip, mingle and worker heartbeats are off: they are cluster chatter, not job work.

Enqueue: ``apply_async`` with one producer inside a kombu ``Producer.batch()`` (Redis
pipeline) where kombu has it, else one LPUSH per message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.metadata import version as _dist_version

from bench.clock import DrainResult, Probe, RunSpec, python
from bench.clock import drain as _drain
from bench.targets import QUEUE

NAME = "celery"

PROBE = Probe(
    pending=lambda r: r.llen(QUEUE),  # kombu's list for priority 0 is the queue name
    inflight=lambda r: r.hlen("unacked"),
)


def probe(spec: RunSpec) -> Probe:
    return PROBE


def version() -> str:
    import celery  # noqa: F401 - ImportError means "not installed"
    import kombu.transport.redis  # noqa: F401

    return _dist_version("celery")


def configs(opts) -> list[tuple[str, str, dict]]:
    c = opts.concurrency
    return [("", f"-P threads -c {c}, early ack, prefetch {4 * c}", {})]


def enqueue(n: int, spec: RunSpec) -> float:
    from bench.peer_tasks import celery_tasks

    app, task = celery_tasks.app, getattr(celery_tasks, spec.job)
    with app.producer_or_acquire() as producer:
        producer.connection.ensure_connection()
        batch = getattr(producer, "batch", None)  # kombu >= 5.7
        start = time.perf_counter()
        if batch is None:
            for _ in range(n):
                task.apply_async(producer=producer)
        else:
            with batch():
                for _ in range(n):
                    task.apply_async(producer=producer)
        return time.perf_counter() - start


def worker_argv(spec: RunSpec) -> Callable[[int], list[str]]:
    """The command line of worker process ``i`` (drain and bench/trickle.py)."""

    def argv(i: int) -> list[str]:
        return [
            python(), "-m", "celery", "-A", "bench.peer_tasks.celery_tasks", "worker",
            "--pool", "threads",
            "--concurrency", str(spec.concurrency),
            "--queues", QUEUE,
            "--hostname", f"bench{i}@%h",
            "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip

    return argv


def worker_env() -> dict[str, str]:
    """What its workers' environment adds."""
    return {}


def stamp_pusher(spec: RunSpec) -> Callable[[str], None]:
    """Pushes one trickle job (bench/trickle.py): ``apply_async``."""
    from bench.peer_tasks import celery_tasks

    celery_tasks.app.connection_for_write().ensure_connection()
    return lambda token: celery_tasks.stamp.apply_async((token,)) and None


def drain(n: int, spec: RunSpec) -> DrainResult:
    return _drain(n, spec, argv=worker_argv(spec), env=worker_env(), probe=PROBE)
