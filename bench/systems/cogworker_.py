"""cogworker_django: ``manage.py cogworker -c C --fetch reliable|basic -q bench`` in testproject/.

Both the bench process (for the bulk enqueue) and the worker run the test project with
``COGWORKER_REDIS_URL`` and ``COGWORKER_PREFIX`` from the environment; the bench checks
that the settings really picked them up before it writes anything.

Reliable fetch moves each job into the process's ``inprogress`` list until it is acked,
so "done" is exact; basic fetch pops, so up to C jobs may still run when the clock stops.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from bench.clock import DrainResult, Probe, RunSpec, python, repo_root, scan_llen
from bench.clock import drain as _drain
from bench.targets import DONE_KEY, QUEUE, BenchError, redacted, url_for

NAME = "cogworker"
PREFIX = "bench"
FETCH_MODES = ["reliable", "basic"]

# Key names of docs/internals.md's data model (built in the package by cogworker_django.store.keys).
_QUEUE_KEY = f"{PREFIX}:queue:{QUEUE}"
_INPROGRESS_PATTERN = f"{PREFIX}:inprogress:*"  # does not match "bench:inprogress_ids"

RELIABLE_PROBE = Probe(
    pending=lambda r: r.llen(_QUEUE_KEY),
    inflight=lambda r: scan_llen(r, _INPROGRESS_PATTERN),
    failed=lambda r: r.zcard(f"{PREFIX}:retry") + r.zcard(f"{PREFIX}:dead"),
    # testapp.jobs.bench_incr counts under the prefix, as every key of the package is.
    done=lambda r: int(r.get(f"{PREFIX}:{DONE_KEY}") or 0),
)
BASIC_PROBE = Probe(
    pending=RELIABLE_PROBE.pending, failed=RELIABLE_PROBE.failed, done=RELIABLE_PROBE.done
)

_django_ready = False


def version() -> str:
    import cogworker_django  # ImportError means "not installed"

    try:
        from importlib.metadata import version as dist_version

        return dist_version("cogworker-django")
    except Exception:  # noqa: BLE001 - not pip-installed: the module may still say
        return str(getattr(cogworker_django, "__version__", "?"))


def configs(opts) -> list[tuple[str, str, dict]]:
    modes = FETCH_MODES if opts.fetch == "both" else [opts.fetch]
    return [(m, f"{m} fetch, {opts.concurrency} threads", {"fetch": m}) for m in modes]


def _env() -> dict[str, str]:
    return {
        "COGWORKER_REDIS_URL": url_for(NAME),
        "COGWORKER_PREFIX": PREFIX,
        "DJANGO_SETTINGS_MODULE": "testproject.test_settings",
        # No periodic entries: the test project's demo entries would push other jobs
        # (Huey runs with -n for the same reason).
        "COGWORKER_PERIODIC_JSON": "{}",
        # WARNING, like every peer: no log line per job.
        "COGWORKER_LOG_LEVEL": "WARNING",
    }


def _setup_django() -> None:
    global _django_ready
    if _django_ready:
        return
    project = str(repo_root() / "testproject")
    if project not in sys.path:
        sys.path.insert(0, project)
    import django
    from django.conf import settings

    # The settings read the environment once, at setup; restore it afterwards so the
    # peers' worker subprocesses do not inherit a Django settings module.
    saved = {k: os.environ.get(k) for k in _env()}
    os.environ.update(_env())
    try:
        django.setup()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    conf = getattr(settings, "COGWORKER", {})
    if conf.get("REDIS_URL") != url_for(NAME) or conf.get("PREFIX") != PREFIX:
        raise BenchError(
            "testproject settings must take COGWORKER['REDIS_URL'] and ['PREFIX'] from the "
            f"COGWORKER_REDIS_URL / COGWORKER_PREFIX environment variables; got "
            f"{redacted(str(conf.get('REDIS_URL')))!r} / {conf.get('PREFIX')!r}"
        )
    _django_ready = True


def enqueue(n: int, spec: RunSpec) -> float:
    _setup_django()
    from testapp.jobs import bench_incr, noop

    task = (bench_incr if spec.job == "incr" else noop).using(queue=QUEUE)
    args = [() for _ in range(n)]
    _connect()
    start = time.perf_counter()
    task.enqueue_many(args)  # one pipeline
    return time.perf_counter() - start


def _connect() -> None:
    """Open the package's Redis connection before the clock starts, as for every peer."""
    try:
        from cogworker_django.store.connection import get_client
    except ImportError:  # the module layout changed: the lazy connect is then timed (~1 ms)
        return
    get_client().ping()


def probe(spec: RunSpec) -> Probe:
    return RELIABLE_PROBE if spec.params["fetch"] == "reliable" else BASIC_PROBE


def worker_argv(spec: RunSpec) -> Callable[[int], list[str]]:
    """The command line of worker process ``i`` (drain and bench/trickle.py)."""

    def argv(i: int) -> list[str]:
        return [
            python(), "testproject/manage.py", "cogworker",
            "-c", str(spec.concurrency),
            "--fetch", spec.params["fetch"],
            "-q", QUEUE,
        ]  # fmt: skip

    return argv


def worker_env() -> dict[str, str]:
    """What its workers' environment adds."""
    return _env()


def stamp_pusher(spec: RunSpec) -> Callable[[str], None]:
    """Pushes one trickle job (bench/trickle.py): ``enqueue``, one call a job."""
    _setup_django()
    from testapp.jobs import bench_stamp

    task = bench_stamp.using(queue=QUEUE)
    _connect()
    return lambda token: task.enqueue(token) and None


def drain(n: int, spec: RunSpec) -> DrainResult:
    return _drain(n, spec, argv=worker_argv(spec), env=worker_env(), probe=probe(spec))
