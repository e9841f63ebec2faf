"""RQ: one job at a time per worker process; it has no threads, so ``--concurrency`` does
not apply.

Two worker classes, both one ``rq worker`` process:
- ``simple``: ``SimpleWorker`` runs each job in the worker process itself (no fork);
  the like-for-like comparison with one process running jobs.
- ``fork``: the default ``Worker`` forks a work horse per job (RQ's isolation model and
  its default); shown because that is what most RQ deployments run.

Jobs are enqueued with ``result_ttl=0`` (no result kept), like every other system here:
none of them stores a no-op's result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.metadata import version as _dist_version

from bench.clock import DrainResult, Probe, RunSpec, python
from bench.clock import drain as _drain
from bench.targets import QUEUE, client_for, url_for

NAME = "rq"
WORKER_CLASSES = {
    "simple": ("rq.worker.SimpleWorker", "SimpleWorker (no fork), 1 job at a time"),
    "fork": ("rq.worker.Worker", "Worker (fork per job), 1 job at a time"),
}

# RQ_KEY_PREFIX is left at its default, "rq".
_QUEUE_KEY = f"rq:queue:{QUEUE}"
# RQ moves a job here (BLMOVE) before it registers it as started.
_INTERMEDIATE_KEY = f"{_QUEUE_KEY}:intermediate"
_STARTED_KEY = f"rq:wip:{QUEUE}"
_FAILED_KEY = f"rq:failed:{QUEUE}"

PROBE = Probe(
    pending=lambda r: r.llen(_QUEUE_KEY),
    inflight=lambda r: r.llen(_INTERMEDIATE_KEY) + r.zcard(_STARTED_KEY),
    failed=lambda r: r.zcard(_FAILED_KEY),
)


def probe(spec: RunSpec) -> Probe:
    return PROBE


def version() -> str:
    import rq  # noqa: F401 - ImportError means "not installed"

    return _dist_version("rq")


def configs(opts) -> list[tuple[str, str, dict]]:
    kinds = ["simple", "fork"] if opts.rq_worker == "both" else [opts.rq_worker]
    return [(k, WORKER_CLASSES[k][1], {"worker_class": WORKER_CLASSES[k][0]}) for k in kinds]


def enqueue(n: int, spec: RunSpec) -> float:
    from rq import Queue

    from bench.peer_tasks import rq_tasks

    fn = getattr(rq_tasks, spec.job)
    connection = client_for(NAME)
    connection.ping()
    queue = Queue(QUEUE, connection=connection)
    start = time.perf_counter()
    # enqueue_many: every job in one pipeline.
    queue.enqueue_many([Queue.prepare_data(fn, result_ttl=0) for _ in range(n)])
    elapsed = time.perf_counter() - start
    connection.close()
    return elapsed


def worker_argv(spec: RunSpec) -> Callable[[int], list[str]]:
    """The command line of worker process ``i`` (drain and bench/trickle.py)."""

    def argv(i: int) -> list[str]:
        return [
            python(), "-m", "rq.cli", "worker",
            "--url", url_for(NAME),
            "--worker-class", spec.params["worker_class"],
            "--name", f"bench-{i}",
            "--results-ttl", "0",
            "--logging_level", "WARNING",
            "--disable-job-desc-logging",
            QUEUE,
        ]  # fmt: skip

    return argv


def worker_env() -> dict[str, str]:
    """What its workers' environment adds."""
    return {}


def stamp_pusher(spec: RunSpec) -> Callable[[str], None]:
    """Pushes one trickle job (bench/trickle.py): ``Queue.enqueue``, one call a job."""
    from rq import Queue

    from bench.peer_tasks import rq_tasks

    connection = client_for(NAME)
    connection.ping()
    queue = Queue(QUEUE, connection=connection)
    return lambda token: queue.enqueue(rq_tasks.stamp, token, result_ttl=0) and None


def drain(n: int, spec: RunSpec) -> DrainResult:
    return _drain(n, spec, argv=worker_argv(spec), env=worker_env(), probe=PROBE)
