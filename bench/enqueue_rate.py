"""Enqueue throughput from one process: ``enqueue_many`` in bulk and single ``enqueue``.

    .venv/bin/python -m bench.enqueue_rate [--bulk 100000] [--single 10000]

The bulk is timed twice: jobs with no arguments, then jobs with two (an id and an
e-mail address, as a real bulk call carries), in calls of 1,000.

Uses the test project's settings under a throwaway prefix on BENCH_REDIS_URL (default
redis://127.0.0.1:6379/0), and deletes its keys afterwards.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bulk", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=10_000)
    args = parser.parse_args()
    prefix = f"benchenq{secrets.token_hex(3)}"
    os.environ["COGWORKER_PREFIX"] = prefix
    os.environ.setdefault(
        "COGWORKER_REDIS_URL", os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    os.environ["DJANGO_SETTINGS_MODULE"] = "testproject.test_settings"
    sys.path[:0] = [str(ROOT / "testproject"), str(ROOT)]
    import django

    django.setup()
    from testapp.jobs import noop, takes_anything

    from cogworker_django.store import connection, keys

    client = connection.get_client()
    try:
        started = time.perf_counter()
        for start in range(0, args.bulk, 1000):
            noop.enqueue_many([() for _ in range(min(1000, args.bulk - start))])
        bulk = time.perf_counter() - started
        calls = [(i, f"user{i}@example.com") for i in range(args.bulk)]
        started = time.perf_counter()
        for start in range(0, args.bulk, 1000):
            takes_anything.enqueue_many(calls[start : start + 1000])
        bulk_args = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(args.single):
            noop.enqueue()
        single = time.perf_counter() - started
        assert client.llen(keys.queue("default")) == 2 * args.bulk + args.single
    finally:
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)
    print(f"enqueue_many: {args.bulk} jobs in {bulk:.3f}s = {args.bulk / bulk:,.0f} jobs/s")
    print(
        f"  with 2 args: {args.bulk} jobs in {bulk_args:.3f}s = {args.bulk / bulk_args:,.0f} jobs/s"
    )
    print(f"enqueue:      {args.single} jobs in {single:.3f}s = {args.single / single:,.0f} jobs/s")


if __name__ == "__main__":
    main()
