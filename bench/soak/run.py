"""``python -m bench.soak [--seconds 600]``: one soak, start to finish (see __init__)."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from . import check, report
from .chaos import Chaos
from .faults import Journal, clock
from .fleet import Fleet
from .monitor import Monitor
from .procs import ROOT, RedisServer, SoakError, wait_until
from .producer import Producer

PREFIX = "soak"
QUEUES = ["critical:3", "default:2", "low"]
QUEUE_NAMES = ["critical", "default", "low"]
# Short timings, so that a dead worker's jobs come back within the soak, yet an
# ORPHAN_THRESHOLD under the 30 s SIGSTOP: a stalled process is taken for dead while it
# lives (docs/reliability.md: one of the cases where a job runs twice).
SETTINGS = {
    "QUEUES": QUEUES,
    "CONCURRENCY": 4,
    "HEARTBEAT_INTERVAL": 1.0,
    "POLL_INTERVAL": 0.5,
    "ORPHAN_CHECK_INTERVAL": 2.0,
    "ORPHAN_THRESHOLD": 10,
    "MAX_ORPHANINGS": 3,
    "KEYGUARD_INTERVAL": 2.0,
    "PERIODIC_TICK": 0.25,  # every-second entries need a tick under a second
    "PERIODIC_ACTIVE_TTL": 5.0,
    "FETCH_IDLE_MAX_INTERVAL": 0.2,
    "SHUTDOWN_TIMEOUT": 4,
    "UNIQUE_RESCHEDULE_DELAY": 1.0,
    "RETRY_BACKOFF": "soakapp.jobs.backoff",
}
# --defaults: every timing of the workers at the package's default (beats every 5 s,
# ORPHAN_THRESHOLD 300 s and its check every 60 s, the lifeline's 10 s, SHUTDOWN_TIMEOUT
# 25 s, the key guard every 60 s ...), as a production fleet runs. Kept from SETTINGS:
# the queues and the concurrency (the load), MAX_ORPHANINGS (its default), the soak's
# retry backoff (its flaky jobs come back in a second or two, not the default's
# minutes) and the periodic tick (every-second entries need a tick under a second).
# The 30 s SIGSTOP is then shorter than the threshold: a stall the fleet rides out.
KEPT_AT_DEFAULTS = ("QUEUES", "CONCURRENCY", "MAX_ORPHANINGS", "RETRY_BACKOFF", "PERIODIC_TICK")
PERIODIC = {
    "soak-tick": {"cron": "* * * * * *", "job": "soakapp.jobs.tick"},
    "soak-tick-ue": {
        "cron": "* * * * * *",
        "job": "soakapp.jobs.tick_until_executed",
        "unique": "until_executed",
    },
}
DRAIN_QUIET = 3.0  # seconds with nothing left anywhere before the checks


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=600, help="seconds of chaos (default 600)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a new one)")
    p.add_argument(
        "--gap",
        type=float,
        nargs=2,
        default=(2.0, 6.0),
        metavar=("MIN", "MAX"),
        help="seconds between faults, uniform (default 2 6)",
    )
    p.add_argument("--drain", type=float, default=150, help="longest wait for the drain (s)")
    p.add_argument(
        "--defaults",
        action="store_true",
        help="run the workers at the package's default timings (beats, recovery, "
        "shutdown, key guard), not the soak's short ones",
    )
    p.add_argument("--workdir", help="directory for logs and traces (default: a new one in /tmp)")
    p.add_argument("--keep-redis", action="store_true", help="keep Redis's files at the end")
    return p.parse_args(argv)


def worker_settings(defaults: bool) -> dict:
    """The workers' COGWORKER settings: the soak's short timings, or the defaults."""
    if not defaults:
        return dict(SETTINGS)
    return {k: SETTINGS[k] for k in KEPT_AT_DEFAULTS}


def _setup_django(env: dict) -> None:
    os.environ.update({k: v for k, v in env.items() if k != "SOAK_TRACE_DIR"})
    sys.path[:0] = [str(ROOT), str(ROOT / "testproject")]
    import django

    django.setup()


def _say(text: str) -> None:
    print(f"[{clock(time.time())}] {text}", flush=True)


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    rng = random.Random(seed)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="cogworker-soak-"))
    logdir, tracedir = workdir / "logs", workdir / "traces"
    logdir.mkdir(parents=True, exist_ok=True)
    tracedir.mkdir(parents=True, exist_ok=True)
    journal = Journal()
    server = RedisServer(workdir)
    settings = worker_settings(args.defaults)
    # What the checks read of the workers' settings (their defaults where not set).
    shutdown_timeout = settings.get("SHUTDOWN_TIMEOUT", 25)
    active_ttl = settings.get("PERIODIC_ACTIVE_TTL", 60.0)
    keyguard_interval = settings.get("KEYGUARD_INTERVAL", 60.0)
    env = {
        **os.environ,
        "COGWORKER_REDIS_URL": server.url,
        "COGWORKER_PREFIX": PREFIX,
        "COGWORKER_SETTINGS_JSON": json.dumps(settings),
        "COGWORKER_PERIODIC_JSON": json.dumps(PERIODIC),
        "COGWORKER_LOG_LEVEL": "DEBUG",  # the ticker's "enqueued as" lines
        "TESTPROJECT_EXTRA_APPS": "soakapp",
        "TESTPROJECT_DB": str(workdir / "db.sqlite3"),
        "DJANGO_SETTINGS_MODULE": "testproject.test_settings",
        "SOAK_TRACE_DIR": str(tracedir),
        "PYTHONUNBUFFERED": "1",
        # The package of this checkout, whatever the virtualenv has installed.
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    env.pop("COGWORKER_TASKS_BACKEND", None)
    fleet = Fleet(env, logdir, journal, shutdown_timeout)
    monitor = Monitor(fleet, server, journal)
    chaos: Chaos | None = None
    producer: Producer | None = None
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    _say(
        f"soak for {args.seconds:.0f} s, seed {seed}, Redis on 127.0.0.1:{server.port}, "
        f"{'the default timings' if args.defaults else 'short timings'}, logs in {logdir}"
    )
    try:
        server.start()
        _setup_django(env)
        fleet.start_all()
        _say("3 workers up (one with --processes 2); chaos begins")
        start = time.time()
        ends_at = start + args.seconds
        monitor.entries = list(PERIODIC)
        monitor.start()
        producer = Producer(rng=random.Random(rng.random()), ends_at=ends_at)
        producer.start()
        chaos = Chaos(
            fleet=fleet,
            server=server,
            journal=journal,
            rng=random.Random(rng.random()),
            prefix=PREFIX,
            queues=QUEUE_NAMES,
            entries=list(PERIODIC),
            gap=tuple(args.gap),
            ends_at=ends_at,
            # The key guard looks every KEYGUARD_INTERVAL: a wrong value waits that long.
            watch_limit=max(60.0, 2 * keyguard_interval),
        )
        chaos.start()
        every = 30 if args.seconds <= 600 else 300
        next_note = start + every
        while time.time() < ends_at:
            time.sleep(min(1.0, max(0.0, ends_at - time.time())))
            if time.time() >= next_note:
                next_note += every
                _say(
                    f"{time.time() - start:.0f} s: {len(journal.faults)} faults, "
                    f"{len(producer.records)} enqueues"
                )
        producer.stop()
        chaos.stop()
        fleet.wait_reaped(60)
        _say(
            f"chaos over: {len(journal.faults)} faults, {len(producer.records)} enqueues; draining"
        )
        from cogworker_django.api import PeriodicEntries

        entries = PeriodicEntries()
        wait_until(lambda: [entries.disable(name) for name in PERIODIC] or True, 30, 0.5)
        disabled_at = time.time()
        drained_at = _drain(server, args.drain)
        _say(
            "drained"
            if drained_at is not None
            else f"not drained after {args.drain:.0f} s; checking anyway"
        )
        monitor.stop()
        with server.client(timeout=10) as conn:
            state = check.read_redis(conn, PREFIX)
        stop_codes = fleet.stop_all(shutdown_timeout + 30)
        ctx = check.Context(
            records=producer.records,
            runs=check.load_runs(tracedir),
            state=state,
            journal=journal,
            logs=sorted(logdir.glob("w*.log")),
            entries={name: e.get("unique") == "until_executed" for name, e in PERIODIC.items()},
            disabled_at=disabled_at,
            soak_end=time.time(),
            max_orphanings=settings["MAX_ORPHANINGS"],
            active_ttl=active_ttl,
            stop_codes=stop_codes,
            claimed=monitor.claimed,
            entry_queues={name: "critical" for name in PERIODIC},  # soakapp's tick jobs
            drained_at=drained_at,
        )
        invariants = check.check_all(ctx)
        for thread_error, who in ((chaos.error, "chaos"), (producer.error, "producer")):
            if thread_error is not None:
                raise SoakError(f"the {who} thread failed: {thread_error!r}")
        (workdir / "report.txt").write_text(report.details(journal, invariants))
        print(
            report.table(
                args.seconds,
                seed,
                journal,
                ctx.figures,
                invariants,
                str(workdir),
                fleet.boot_refusals,
            ),
            flush=True,
        )
        return 0 if all(i.passed for i in invariants) else 1
    except (KeyboardInterrupt, _Stop) as exc:
        _say(f"interrupted ({exc or 'Ctrl-C'}); stopping everything")
        return 130
    except SoakError as exc:
        _say(f"soak error: {exc}")
        return 2
    finally:
        # The cleanup is bounded and must run to its end: no process of the soak may
        # outlive it, so a second Ctrl-C waits for it.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        try:
            monitor.stop()  # first: it would start replacements for the workers killed below
            if chaos is not None:
                chaos.halt()
            fleet.kill_all()
        finally:
            server.kill()
            if not args.keep_redis:
                shutil.rmtree(server.dir, ignore_errors=True)
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            print(f"logs: {logdir}", file=sys.stderr, flush=True)


def _drain(server: RedisServer, timeout: float) -> float | None:
    """Wait until no job is anywhere in Redis (queues, schedule, retry, in-progress
    lists, unsettled) for DRAIN_QUIET seconds; returns when that quiet began (epoch
    seconds), None if it did not come within ``timeout``."""
    p = PREFIX
    quiet_since = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with server.client(timeout=5) as c:
                busy = c.zcard(f"{p}:schedule") + c.zcard(f"{p}:retry") + c.llen(f"{p}:unsettled")
                for pattern in (f"{p}:queue:*", f"{p}:inprogress:*"):
                    for key in c.scan_iter(match=pattern, count=1000):
                        busy += c.llen(key)
                for key in c.scan_iter(match=f"{p}:pqueue:*", count=1000):
                    busy += c.zcard(key)
        except Exception:  # noqa: BLE001 - a wrong-typed key or a slow Redis: look again
            busy = 1
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        elif time.time() - quiet_since >= DRAIN_QUIET:
            return quiet_since
        time.sleep(0.5)
    return None
