"""Sidekiq (Ruby): ``sidekiq -r bench/peer_tasks/sidekiq_job.rb -q bench -c C``, one
process with C processor threads under Ruby's one lock, each doing its own BRPOP.

Sidekiq (the open-source one) pops a job and has no in-flight record, so with
``--job noop`` up to C jobs may still run when the queue shows empty (as Huey); with
``--job incr`` every job is counted. Bulk enqueue is ``Sidekiq::Client.push_bulk``, 1,000
jobs a call, run by ``ruby`` (the script times itself). Installed on Debian with
``apt-get install ruby ruby-sidekiq``; without ``ruby`` and ``sidekiq`` it is skipped.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from bench.clock import DrainResult, Probe, RunSpec, repo_root
from bench.clock import drain as _drain
from bench.external import timed_enqueue
from bench.targets import DONE_KEY, QUEUE, client_for, url_for

NAME = "sidekiq"
JOB_FILE = repo_root() / "bench" / "peer_tasks" / "sidekiq_job.rb"

_QUEUE_KEY = f"queue:{QUEUE}"

PROBE = Probe(
    pending=lambda r: r.llen(_QUEUE_KEY),
    failed=lambda r: r.zcard("retry") + r.zcard("dead"),
)


def probe(spec: RunSpec) -> Probe:
    return PROBE


def _tools() -> tuple[str, str]:
    ruby, sidekiq = shutil.which("ruby"), shutil.which("sidekiq")
    if not (ruby and sidekiq):
        raise ImportError("no ruby or sidekiq on PATH (Debian: apt-get install ruby ruby-sidekiq)")
    return ruby, sidekiq


def version() -> str:
    ruby, _ = _tools()
    out = subprocess.run(
        [ruby, "-e", 'require "sidekiq"; print Sidekiq::VERSION'],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise ImportError(f"ruby cannot load sidekiq: {out.stderr.strip()[-200:]}")
    return out.stdout.strip()


def configs(opts) -> list[tuple[str, str, dict]]:
    return [("", f"-c {opts.concurrency} (threads, BRPOP each, no ack)", {})]


def _env() -> dict[str, str]:
    return {"BENCH_SIDEKIQ_URL": url_for(NAME), "BENCH_DONE_KEY": DONE_KEY, "BENCH_QUEUE": QUEUE}


def enqueue(n: int, spec: RunSpec) -> float:
    ruby, _ = _tools()
    argv = [ruby, str(JOB_FILE), "enqueue", spec.job, str(n)]
    return timed_enqueue(argv, _env(), timeout=spec.timeout)


def worker_argv(spec: RunSpec) -> Callable[[int], list[str]]:
    """The command line of worker process ``i`` (drain and bench/trickle.py)."""
    _, sidekiq = _tools()

    def argv(i: int) -> list[str]:
        # -t 5: the shutdown wait (25 s by default); the queue is drained when it is sent.
        return [sidekiq, "-r", str(JOB_FILE), "-q", QUEUE, "-c", str(spec.concurrency), "-t", "5"]

    return argv


def worker_env() -> dict[str, str]:
    """What its workers' environment adds."""
    return _env()


def stamp_pusher(spec: RunSpec) -> Callable[[str], None]:
    """Pushes one trickle job (bench/trickle.py) as Sidekiq::Client.push writes it (a
    Ruby process per push would time Ruby's start): the job's JSON LPUSHed onto
    ``queue:<q>``, the queue added to ``queues``, in one round trip."""
    import json
    import secrets
    import time

    client = client_for(NAME)
    client.ping()

    def push(token: str) -> None:
        now = time.time()
        job = {
            "class": "StampJob", "args": [token], "queue": QUEUE, "retry": True,
            "jid": secrets.token_hex(12), "created_at": now, "enqueued_at": now,
        }  # fmt: skip
        pipe = client.pipeline(transaction=False)
        pipe.sadd("queues", QUEUE)
        pipe.lpush(f"queue:{QUEUE}", json.dumps(job))
        pipe.execute()

    return push


def drain(n: int, spec: RunSpec) -> DrainResult:
    return _drain(n, spec, argv=worker_argv(spec), env=worker_env(), probe=PROBE)
