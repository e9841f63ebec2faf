"""``python -m bench.trickle``: pickup latency, side by side. For each job system, one
idle worker process (``-c``); jobs pushed one at a time at a fixed rate, each stamping
when it started; the median, p90 and p99 from push to start.

    python -m bench.trickle [--systems cogworker,rq,dramatiq,huey,celery,sidekiq]
        [--rate 2,50,200] [--jobs 300] [-c 10]

Every system runs against the same Redis (``BENCH_REDIS_URL``), each in its own
database, flushed before and after (bench/targets.py). A system whose library is not
installed is skipped with a line saying so. The job is each system's ``stamp(token)``
(bench/peer_tasks/): one HSET of ``time.time()``; the pusher stamps the push just before
its call, on the same clock. docs/performance.md "Pickup latency".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.clock import RunSpec, repo_root, worker_env
from bench.systems import load
from bench.targets import LATENCY_KEY, client_for, flush
from bench.workers import WorkerGroup

SYSTEMS = ["cogworker", "rq", "dramatiq", "huey", "celery", "sidekiq"]
# A worker is idle this long before the first push: past any poll's backoff.
SETTLE_SECONDS = 3.0


def quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def one_rate(system, spec: RunSpec, rate: float, jobs: int) -> list[float]:
    """Push ``jobs`` stamp jobs at ``rate`` a second; the seconds from each push to its
    start, sorted."""
    push = system.stamp_pusher(spec)
    client = client_for(spec.system)
    client.delete(LATENCY_KEY)
    pushed: dict[str, float] = {}
    gap, next_at = 1.0 / rate, time.monotonic()
    for i in range(jobs):
        next_at += gap
        time.sleep(max(0.0, next_at - time.monotonic()))
        token = f"t{i}"
        pushed[token] = time.time()
        push(token)
    deadline = time.monotonic() + 60
    while client.hlen(LATENCY_KEY) < jobs and time.monotonic() < deadline:
        time.sleep(0.05)
    started = {k.decode(): float(v) for k, v in client.hgetall(LATENCY_KEY).items()}
    client.close()
    if len(started) < jobs:
        raise RuntimeError(f"{len(started)} of {jobs} jobs started within a minute")
    return sorted(started[t] - at for t, at in pushed.items())


def run_system(name: str, args: argparse.Namespace, log_root: Path) -> list[str]:
    try:
        system = load(name)
        system.version()
    except ImportError as exc:
        return [f"{name}: skipped ({exc})"]
    log_dir = log_root / name
    log_dir.mkdir()
    params = system.configs(args)[0][2] if hasattr(system, "configs") else {}
    spec = RunSpec(
        system=name,
        config="trickle",
        params=params,
        concurrency=args.concurrency,
        processes=1,
        timeout=60.0,
        log_dir=log_dir,
        job="stamp",
    )
    flush(name)
    group = WorkerGroup(
        [system.worker_argv(spec)(0)],
        env=worker_env(system.worker_env()),
        cwd=repo_root(),
        log_dir=log_dir,
    )
    lines = []
    try:
        group.start()
        time.sleep(SETTLE_SECONDS)
        for rate in args.rates:
            waits = [w * 1000 for w in one_rate(system, spec, rate, args.jobs)]
            lines.append(
                f"{name:10} -c {args.concurrency} {rate:>5g} jobs/s: median "
                f"{statistics.median(waits):7.1f} ms  p90 {quantile(waits, 0.9):7.1f} ms  "
                f"p99 {quantile(waits, 0.99):7.1f} ms"
            )
            print(lines[-1], flush=True)
            time.sleep(SETTLE_SECONDS)
    except Exception as exc:  # noqa: BLE001 - one system's failure: the others still run
        lines.append(f"{name}: failed ({exc}; logs in {log_dir})")
        print(lines[-1], flush=True)
    finally:
        group.stop()
        flush(name)
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.trickle", description=__doc__.split("\n")[0])
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--rate", default="2,50,200", help="jobs a second, comma-separated")
    p.add_argument("--jobs", type=int, default=300, help="jobs per rate")
    p.add_argument("-c", "--concurrency", type=int, default=10)
    # What the systems' configs() read (bench/__main__.py's defaults).
    p.add_argument("--fetch", default="reliable")
    p.add_argument("--rq-worker", default="simple")
    args = p.parse_args(argv)
    args.rates = [float(x) for x in args.rate.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-trickle-") as logs:
        for name in args.systems.split(","):
            run_system(name.strip(), args, Path(logs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
