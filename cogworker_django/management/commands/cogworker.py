"""``manage.py cogworker``: run a worker process (or several, with ``--processes``).

A bad option or bad settings exit non-zero with one clear line; so do credentials or a
database index that Redis refuses. A Redis that does not answer yet is waited for
(management/waiting.py): a worker started before its Redis (Compose, Kubernetes) starts
when Redis does, instead of crash-looping.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from django.core import checks as dj_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from cogworker_django import checks, conf
from cogworker_django.core import jobs
from cogworker_django.management import waiting
from cogworker_django.periodic import entries
from cogworker_django.store import connection, errors

log = logging.getLogger("cogworker_django")
LOG_FORMAT = "%(asctime)s %(levelname)s pid=%(process)d %(threadName)s %(name)s: %(message)s"


class Command(BaseCommand):
    help = "Run a cogworker worker process: fetch and run jobs from Redis."
    requires_system_checks: list[str] = []  # our own checks run below, with clear exits

    def add_arguments(self, parser):
        parser.add_argument(
            "-q",
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME[:WEIGHT]",
            help="a queue to read, with an optional weight (repeatable); "
            "default: COGWORKER['QUEUES']",
        )
        parser.add_argument(
            "-c", "--concurrency", type=int, help="processor threads (default: CONCURRENCY)"
        )
        parser.add_argument(
            "--async-concurrency",
            type=int,
            metavar="N",
            help="async def jobs at once on the event loop (default: ASYNC_CONCURRENCY)",
        )
        parser.add_argument("--fetch", choices=conf.FETCH_MODES, help="fetch mode (default: FETCH)")
        parser.add_argument(
            "--processes", type=int, default=1, help="worker processes to fork (default 1)"
        )
        parser.add_argument("--tag", default="", help="a label shown in the admin's process list")
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            help="seconds to wait for running jobs at TERM (default: SHUTDOWN_TIMEOUT)",
        )
        parser.add_argument("--logfile", help="also write the log to this file")
        parser.add_argument(
            "--metrics-port",
            type=int,
            metavar="PORT",
            help="serve Prometheus metrics on http://ADDR:PORT/metrics (default: METRICS_PORT; "
            "0: off)",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="development only: restart the worker when a Python file of the project "
            "changes, as runserver does (running jobs are handed back first)",
        )
        # The parent of --reload passes its pid to the worker it starts (reload.py).
        parser.add_argument("--reload-parent", type=int, help=argparse.SUPPRESS)
        parser.add_argument(
            "--metrics-addr",
            default="0.0.0.0",
            metavar="ADDR",
            help="the address --metrics-port listens on (default 0.0.0.0)",
        )
        parser.add_argument(
            "--max-jobs",
            type=int,
            metavar="N",
            help="recycle a process once it has started N jobs: it stops fetching, finishes "
            "its running jobs and exits 0 (replaced under --processes)",
        )
        parser.add_argument(
            "--max-memory",
            type=int,
            metavar="MIB",
            help="recycle a process once its RSS passes MIB mebibytes (read after each beat)",
        )

    def handle(self, *args, **opts):
        # Taken first: periodic slots due after this are this worker's to fire.
        started_at = time.time()
        try:
            settings = conf.get()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        kwargs = self._launcher_options(opts, settings)
        metrics = self._metrics_option(opts, settings)
        self._setup_logging(opts["logfile"], opts["verbosity"])
        if opts["reload"]:
            if opts["processes"] > 1:
                raise CommandError("--reload runs one worker process: leave out --processes")
            from cogworker_django.management import reload

            code = reload.run()
            logging.shutdown()
            os._exit(code)
        if opts["reload_parent"]:
            kwargs["supervisor"] = opts["reload_parent"]
        self._import_jobs(opts["verbosity"])
        self._validate()
        stopped = self._check_redis()
        if stopped:
            log.info("%s received while waiting for Redis: exiting", stopped)
            logging.shutdown()
            os._exit(0)
        kwargs.update(fetch_mode=opts["fetch"] or settings.FETCH, started_at=started_at)
        from cogworker_django.worker import supervisor

        try:
            code = (
                supervisor.run_processes(kwargs, opts["processes"], metrics)
                if opts["processes"] > 1
                else supervisor.run_one(kwargs, metrics)
            )
        except supervisor.PortTaken as exc:
            raise CommandError(str(exc)) from None
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        # Threads stuck inside jobs past the shutdown timeout were handed over already;
        # don't let them hold the process (or crash in interpreter teardown).
        os._exit(code)

    def _launcher_options(self, opts: dict, settings: conf.Settings) -> dict[str, Any]:
        """The options the launcher takes, each from its flag or else its setting."""
        queues = settings.QUEUES
        if opts["queues"]:
            try:
                queues = conf.parse_queues(opts["queues"], key="--queue")
            except ImproperlyConfigured as exc:
                raise CommandError(str(exc).replace("COGWORKER['--queue']", "--queue")) from None
        concurrency = _flag_or(opts["concurrency"], settings.CONCURRENCY)
        if concurrency < 1:
            raise CommandError(f"--concurrency must be at least 1, got {concurrency}")
        _within_setting("--concurrency", "CONCURRENCY", concurrency)
        async_concurrency = _flag_or(opts["async_concurrency"], settings.ASYNC_CONCURRENCY)
        if async_concurrency < 1:
            raise CommandError(f"--async-concurrency must be at least 1, got {async_concurrency}")
        _within_setting("--async-concurrency", "ASYNC_CONCURRENCY", async_concurrency)
        if opts["processes"] < 1:
            raise CommandError(f"--processes must be at least 1, got {opts['processes']}")
        timeout = _flag_or(opts["shutdown_timeout"], settings.SHUTDOWN_TIMEOUT)
        if timeout < 0:
            raise CommandError(f"--shutdown-timeout must be >= 0, got {timeout}")
        tag = opts["tag"] or ""
        if tag and not conf.valid_name(tag):
            raise CommandError(f"--tag must not contain whitespace, got {tag!r}")
        for flag in ("max_jobs", "max_memory"):
            if opts[flag] is not None and opts[flag] < 1:
                name = "--" + flag.replace("_", "-")
                raise CommandError(f"{name} must be at least 1, got {opts[flag]}")
        return dict(
            concurrency=concurrency,
            async_concurrency=async_concurrency,
            queues=queues,
            tag=tag,
            shutdown_timeout=timeout,
            max_jobs=opts["max_jobs"],
            max_memory=opts["max_memory"],
        )

    def _import_jobs(self, verbosity: int) -> None:
        try:
            # every installed app's jobs.py and tasks.py, and COGWORKER["JOB_MODULES"]
            modules = jobs.import_job_modules()
        except jobs.JobModuleError as exc:
            # The cause's traceback stays chained: --traceback shows where it failed.
            raise CommandError(f"{exc} (--traceback shows the traceback)") from exc
        except Exception as exc:  # noqa: BLE001 - anything else on the way
            raise CommandError(
                f"The job modules could not be imported: {errors.describe(exc)}"
            ) from exc
        if verbosity >= 2:
            log.info("job modules: %s", ", ".join(modules) or "none")
            log.info(
                "registered jobs: %s", ", ".join(f.path for f in jobs.registered_jobs()) or "none"
            )

    def _validate(self) -> None:
        """Everything the jobs and settings name, before anything starts."""
        # Every bad periodic entry, each with every bad field.
        bad = [m.msg for m in entries.check_messages() if m.is_serious()]
        if bad:
            raise CommandError("\n".join(bad))
        try:
            from cogworker_django.worker import plugins

            plugins.validate(plugins.builtin())
            conf.retry_backoff()  # importable and callable with the retry count
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None

    def _check_redis(self) -> str | None:
        """Redis answers (None), else the signal that ended the wait for it."""
        try:
            stopped = waiting.wait_for_redis(lambda: connection.get_client().ping())
        except ImproperlyConfigured as exc:  # a client that would retry or wait too little
            raise CommandError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - one clear line, no traceback
            raise CommandError(checks.redis_failure(exc)[0]) from None
        if stopped:
            return stopped
        # The deployment checks that need Redis run here too (an old Redis is reported
        # by the launcher as it falls back to basic fetch).
        for message in checks.redis_messages():
            if message.id == "cogworker.W001":
                continue
            # An Info (the cluster's shape, cogworker.I001) is not a warning.
            level = logging.INFO if message.level < dj_checks.WARNING else logging.WARNING
            log.log(level, "%s (%s)", message.msg, message.id)
        return None

    def _metrics_option(self, opts: dict, settings: conf.Settings) -> tuple[int, str] | None:
        """(port, address) to serve metrics on, or None."""
        port = settings.METRICS_PORT if opts["metrics_port"] is None else opts["metrics_port"]
        if not port:
            return None
        try:
            conf.check_metrics_port(port, key="--metrics-port")
            from cogworker_django.observe import telemetry

            telemetry.prometheus()
        except ImproperlyConfigured as exc:
            raise CommandError(
                str(exc).replace("COGWORKER['--metrics-port']", "--metrics-port")
            ) from None
        return port, opts["metrics_addr"]

    def _setup_logging(self, logfile: str | None, verbosity: int) -> None:
        if not log.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(LOG_FORMAT))
            log.addHandler(handler)
        if log.level == logging.NOTSET:
            log.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)
        if logfile:
            try:
                file_handler = logging.FileHandler(logfile)
            except OSError as exc:
                raise CommandError(f"--logfile {logfile!r} can't be opened: {exc}") from None
            file_handler.setFormatter(logging.Formatter(LOG_FORMAT))
            log.addHandler(file_handler)


def _within_setting(flag: str, key: str, value: Any) -> None:
    """A flag holds what its setting may (conf's range for ``key``): the setting's cap
    is no looser on the command line."""
    why = conf.number_problem(key, value)
    if why:
        raise CommandError(f"{flag} {value}: {why} (as COGWORKER[{key!r}])")


def _flag_or(flag: Any, setting: Any) -> Any:
    """A command-line flag's value, or the setting's when the flag was not given."""
    return setting if flag is None else flag
