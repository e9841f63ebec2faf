"""Systems whose workers are not Python (Sidekiq in Ruby, BullMQ in Node): their enqueue
runs as a subprocess of the system's own language, which times its own library calls
(connecting first, as the Python adapters do) and prints ``BENCH_ENQUEUE_SECONDS <s>``
as its last line."""

from __future__ import annotations

import subprocess

from bench.clock import repo_root, worker_env
from bench.targets import BenchError

MARKER = "BENCH_ENQUEUE_SECONDS"


def timed_enqueue(argv: list[str], env: dict[str, str], *, timeout: float) -> float:
    """Run an enqueue script and return the seconds it reports."""
    try:
        done = subprocess.run(
            argv,
            env=worker_env(env),
            cwd=repo_root(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{argv[0]} enqueue gave no answer within {timeout:.0f}s") from exc
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith(MARKER + " "):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise BenchError(
            f"{' '.join(argv[:2])} enqueue failed (exit {done.returncode}): " + " / ".join(tail)
        )
    return float(lines[-1].split()[1])
