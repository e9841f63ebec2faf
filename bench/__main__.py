"""``python -m bench``: how fast does one worker process of each job system drain N jobs
that each do one Redis round trip (or, with ``--job noop``, nothing)?

Every system runs against the same Redis (``BENCH_REDIS_URL``), each in its own
database (``--db-base`` .. +6), flushed before and after its runs. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench import machine, report
from bench.clock import RunSpec, check_enqueued
from bench.systems import ORDER, load
from bench.targets import (
    DB_OFFSETS,
    DEFAULT_DB_BASE,
    DEFAULT_REDIS_URL,
    BenchError,
    db_for,
    flush,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=20000, help="jobs per run (default 20000)")
    p.add_argument(
        "--job",
        choices=["incr", "noop"],
        default="incr",
        help="incr (default): each job does one Redis round trip (INCR of a done counter) "
        "and a drain ends when all are counted; noop: jobs do nothing and a drain ends "
        "when each system's own keys say every job was acked (hides fetch latency)",
    )
    p.add_argument(
        "--systems",
        default=",".join(ORDER),
        help=f"comma-separated subset of {','.join(ORDER)} (default: all; missing ones are skipped)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=10,
        help="threads per worker process for systems that have them (default 10; RQ has none)",
    )
    p.add_argument(
        "--fetch",
        choices=["reliable", "basic", "both"],
        default="both",
        help="cogworker fetch mode(s) (default both)",
    )
    p.add_argument(
        "--rq-worker",
        choices=["simple", "fork", "both"],
        default="simple",
        help="RQ worker class: SimpleWorker (default: one process, no fork), the forking "
        "Worker (a work horse per job, ~4x slower: 20000 jobs take minutes), or both",
    )
    p.add_argument(
        "--processes", type=int, default=1, help="worker processes per system (default 1)"
    )
    p.add_argument("--repeat", type=int, default=1, help="runs per configuration (median shown)")
    p.add_argument(
        "--baseline",
        default="cogworker/reliable",
        help="the configuration ratios are relative to: system or system/variant "
        "(default cogworker/reliable; e.g. rq/simple, celery)",
    )
    p.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL") or DEFAULT_REDIS_URL,
        help="Redis server (default $BENCH_REDIS_URL or redis://127.0.0.1:6379); "
        "any database in it is ignored",
    )
    p.add_argument(
        "--db-base",
        type=int,
        default=int(os.environ.get("BENCH_DB_BASE", DEFAULT_DB_BASE)),
        help="first of the 7 databases used and FLUSHED (default 9: dbs 9..15)",
    )
    p.add_argument(
        "--timeout", type=float, default=600.0, help="give up on one drain after this many seconds"
    )
    p.add_argument("--json", metavar="PATH", help="also write every run and the summary here")
    p.add_argument("--keep-logs", action="store_true", help="keep worker logs even when all ran")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.concurrency < 1 or args.processes < 1 or args.repeat < 1:
        p.error("--jobs, --concurrency, --processes and --repeat must be at least 1")
    if args.db_base < 1:
        p.error("--db-base must be at least 1: database 0 is never flushed")
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in ORDER]
    if unknown:
        p.error(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(ORDER)}")
    return args


def plan(args: argparse.Namespace) -> tuple[list[tuple], list[dict]]:
    """The (module, key, label, params) runs to do, and the skipped systems."""
    runs, skipped = [], []
    for name in [s for s in ORDER if s in args.systems]:
        try:
            module = load(name)
            module.version()
        except ImportError as exc:
            skipped.append(report.skipped(system=name, reason=f"not installed ({exc})"))
            continue
        except Exception as exc:  # noqa: BLE001 - a broken install is reported, not fatal
            skipped.append(report.skipped(system=name, reason=f"import failed ({_describe(exc)})"))
            continue
        for variant, label, params in module.configs(args):
            key = f"{name}/{variant}" if variant else name
            if args.processes > 1:
                label = f"{args.processes} processes x {label}"
            runs.append((module, key, label, params))
    return runs, skipped


def run_one(module, key: str, label: str, params: dict, args, rep: int, log_dir: Path) -> dict:
    spec = RunSpec(
        system=module.NAME,
        config=label,
        params=params,
        concurrency=args.concurrency,
        processes=args.processes,
        timeout=args.timeout,
        log_dir=log_dir,
        job=args.job,
    )
    common = {"key": key, "system": module.NAME, "config": label, "run": rep, "jobs": args.jobs}
    try:
        had = flush(module.NAME)
    except redis.RedisError as exc:
        return report.record(**common, error=f"flush: {_describe(exc)}")
    if had and rep == 1:
        _say(f"  flushed db {db_for(module.NAME)} ({had} keys were there before the bench)")
    try:
        # One system's failure (a bug, a missing test project) must not lose the others'
        # results: it becomes an "error" row with the reason.
        try:
            enqueue_s = module.enqueue(args.jobs, spec)
            check_enqueued(module.NAME, module.probe(spec), args.jobs)
        except Exception as exc:  # noqa: BLE001
            return report.record(**common, error=f"enqueue: {_describe(exc)}")
        try:
            result = module.drain(args.jobs, spec)
        except Exception as exc:  # noqa: BLE001
            return report.record(**common, enqueue_s=enqueue_s, error=f"drain: {_describe(exc)}")
        if result.status != "ok":
            result.detail += f"\n  worker logs: {log_dir}"
        return report.record(**common, enqueue_s=enqueue_s, drain=result)
    finally:
        flush(module.NAME)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["BENCH_REDIS_URL"] = args.redis_url  # the worker subprocesses read these
    os.environ["BENCH_DB_BASE"] = str(args.db_base)
    # A TERM (e.g. from a CI timeout) unwinds like Ctrl-C, so workers are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    try:
        redis.Redis.from_url(args.redis_url).ping()
    except redis.RedisError as exc:
        print(f"Redis at {args.redis_url} does not answer: {exc}", file=sys.stderr)
        return 2
    problem = _databases_problem(args)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    info = machine.describe()
    runs, skipped = plan(args)
    for s in skipped:
        _say(f"skipping {s['system']}: {s['config']}")
    log_dir = Path(tempfile.mkdtemp(prefix="cogworker-bench-"))
    records: list[dict] = []
    try:
        for rep in range(1, args.repeat + 1):
            for module, key, label, params in runs:
                run_dir = log_dir / f"{key.replace('/', '-')}-{rep}"
                run_dir.mkdir()
                _say(f"[run {rep}/{args.repeat}] {key}: {label}: {args.jobs} jobs ...")
                rec = run_one(module, key, label, params, args, rep, run_dir)
                records.append(rec)
                _say(f"  -> {_progress(rec)}")
    finally:
        for module, *_ in {id(r[0]): r for r in runs}.values():
            try:
                flush(module.NAME)
            except redis.RedisError:
                pass

    rows = report.summarize(records, args.baseline) + skipped
    print()
    print(machine.line(info))
    print(
        f"Each system: {args.processes} worker process{'es' if args.processes > 1 else ''} "
        "started for the run, "
        f"{args.concurrency} threads where the system has threads (RQ: one job at a time), "
        f"{args.jobs} {'jobs doing one INCR' if args.job == 'incr' else 'no-op jobs'} "
        "enqueued before the worker starts; one run each"
        + (f", repeated {args.repeat} times (interleaved)" if args.repeat > 1 else "")
        + "."
    )
    print()
    print(report.table(rows, args.baseline))
    print()
    print(
        "startup s: worker process start -> first job taken off the queue. "
        + (
            "drain s: first job taken -> every job counted itself done (its INCR). "
            if args.job == "incr"
            else "drain s: first job taken -> queue empty and no taken-but-unacked job left "
            "(huey, sidekiq and cogworker basic fetch cannot show in-flight jobs: up to C may still "
            "run). "
        )
        + "jobs/s = jobs / drain s. ratio = jobs/s / baseline jobs/s. "
        "enqueue: bulk enqueue from this process, timed separately."
    )
    for line in report.notes(rows, args.baseline):
        print(f"- {line}")
    if args.json:
        params = {k: v for k, v in vars(args).items() if k != "json"}
        report.write_json(args.json, machine=info, params=params, records=records, rows=rows)
        print(f"\nJSON written to {args.json}")

    failed = any(r["status"] not in ("ok",) for r in records)
    if failed or args.keep_logs:
        print(f"\nWorker logs: {log_dir}")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 1 if failed else 0


def _databases_problem(args: argparse.Namespace) -> str | None:
    """Why the chosen systems' databases do not fit the server (None when they do)."""
    highest = args.db_base + max(DB_OFFSETS[name] for name in args.systems)
    try:
        reply = redis.Redis.from_url(args.redis_url).config_get("databases")
        count = int(reply.get("databases") or reply.get(b"databases") or 16)
    except (redis.RedisError, ValueError):
        count = 16  # CONFIG refused (a managed Redis): the default
    if highest < count:
        return None
    return (
        f"--db-base {args.db_base} puts a system on database {highest}, but the server has "
        f"{count} (0..{count - 1}): choose a lower --db-base, or fewer --systems"
    )


def _progress(rec: dict) -> str:
    if rec["status"] != "ok":
        return f"{rec['status']}: {rec['detail']}"
    return (
        f"enqueue {rec['enqueue_s']:.3f}s, startup {rec['startup_s']:.3f}s, "
        f"drain {rec['drain_s']:.3f}s = {rec['jobs_per_s']:,.0f} jobs/s"
        f" (worker stopped in {rec['stop_s']:.2f}s{', SIGKILL' if rec['killed'] else ''})"
    )


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    _say(f"bench finished in {time.perf_counter() - started:.1f}s")
    sys.exit(code)
