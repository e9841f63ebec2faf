"""Worker plugins: the one way a feature joins a worker process.

(Over 400 lines: the plugin interface and every built-in plugin, so that the whole
wiring of a worker's features reads in one place.)

A plugin may give each of six things, and the launcher asks every plugin of its list
for them in the same order (the list below is the whole wiring of the built-ins; nothing
registers itself anywhere):

- ``validate()``: at start, on the main thread, after the job modules are imported and
  before anything runs; raises ``ImproperlyConfigured`` for bad settings;
- ``middleware()``: built-in server middleware, new instances on each call (every
  processor has its own chain); the list's order is the chain's, outermost first, and
  the user's ``COGWORKER["MIDDLEWARE"]["server"]`` runs inside all of them;
- ``start(ctx)``: once the process's run state exists (:class:`RunContext`), before the
  first job can run; returns the plugin's components: chores (background.Chore), run on
  the process's chores thread until the running jobs are handed over, or objects with
  ``start()`` and ``stop()`` (a lifecycle of their own), started after the processors
  and stopped before them;
- ``timers(ctx)``: ``(name, interval, fn)`` triples the poller calls with a Redis
  client every ``interval`` seconds (0: every poll);
- ``beat(ctx, beat)``: after each heartbeat's presence write (:class:`Beat`); an
  exception is reported and the next hook still runs;
- ``renamed(ctx)``: the process was taken for dead while it stalled, and carries on
  under a new identity, ``ctx.identity`` (launcher.py): what the plugin wrote under the
  old one stays with it;
- ``exit(ctx)``: at shutdown, after the processors stopped and before the presence is
  removed (a last flush of what the plugin keeps in memory).

The base class gives a no-op for each, so a plugin says only what it does. A hook that
raises is reported under the plugin's ``name`` and never stops the worker (each call is
``errors.best_effort``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from .. import conf, history
from ..conf import QueueSpec
from ..controls import cancel, limits, options
from ..core import staleness, unique
from ..durable import chore
from ..observe import runlog, telemetry
from ..periodic import entries, running_lock, source, ticker
from ..store import runtime
from ..workflows.middleware import BatchMiddleware
from . import keyguard
from .background import Chore
from .heartbeat import Beat
from .ledger import Ledger
from .timeouts import Watchdog

if TYPE_CHECKING:
    from .limit_waker import LimitWaker

# (name, interval, fn): the poller calls fn with its Redis client every interval.
Timer = tuple[str, float, Callable[[redis.Redis], Any]]

log = logging.getLogger("cogworker_django")
# How often the job modules' files are looked at (a stat each; a handful of files).
CODE_WATCH_INTERVAL = 2.0


@dataclass(frozen=True)
class RunContext:
    """What a plugin may use of one worker process (built by the launcher once the
    processors' state exists)."""

    identity: str
    queues: tuple[QueueSpec, ...]
    started_at: float  # the process's start (epoch): periodic slots due after it are its own
    ledger: Ledger  # every job this process holds: what it performs, what it owes Redis
    watchdog: Watchdog  # the runs in a job, their time limits and cancellation
    nudge: Callable[[], None] | None  # wakes the job source's fetch at once (None: no such)
    recovered_once: Callable[[], bool]  # orphan recovery has completed at least once


class Plugin:
    name = "plugin"

    def validate(self) -> None:
        return None

    def middleware(self) -> tuple[Any, ...]:
        return ()

    def start(self, ctx: RunContext) -> Sequence[Any]:
        return ()

    def timers(self, ctx: RunContext) -> Sequence[Timer]:
        return ()

    def beat(self, ctx: RunContext, beat: Beat) -> None:
        return None

    def renamed(self, ctx: RunContext) -> None:
        """The process carries on as ``ctx.identity`` (it was fenced: launcher.py)."""
        return None

    def exit(self, ctx: RunContext) -> None:
        return None


class History(Plugin):
    """Every run's record: its middleware times everything inside it (so it is first),
    a thread writes the buffer, the last runs are written at exit."""

    name = "History"

    def middleware(self) -> tuple[Any, ...]:
        return (history.HistoryMiddleware(),)

    def start(self, ctx: RunContext) -> Sequence[Any]:
        if not history.enabled():
            return ()
        history.buffer.worker = ctx.identity
        flush = Chore(
            history.COMPONENT,
            _flush_history,
            history.FLUSH_INTERVAL,
            first_at=history.FLUSH_INTERVAL,
        )
        history.buffer.on_full = flush.wake  # a batch waiting: flushed at once
        return (flush,)

    def renamed(self, ctx: RunContext) -> None:
        history.buffer.worker = ctx.identity

    def exit(self, ctx: RunContext) -> None:
        history.buffer.on_full = None
        history.flush_safely()  # runs that finished while the processors stopped


def _flush_history(conn: redis.Redis) -> None:
    history.flush_safely(conn)  # (an outage is reported there, once)


class Telemetry(Plugin):
    """The run log's start/done lines (-v 2), the worker metrics and the run's trace
    span."""

    name = "Telemetry"

    def middleware(self) -> tuple[Any, ...]:
        return (runlog.RunLogMiddleware(), telemetry.TelemetryMiddleware())


class Unique(Plugin):
    name = "Unique"

    def middleware(self) -> tuple[Any, ...]:
        return (unique.UniqueMiddleware(),)


class Periodic(Plugin):
    """Periodic entries: their until_executed runs' locks kept alive by every beat, and
    the ticks, a chore (settings entries resolved on the main thread: rule 10; the
    database's read on a thread started on demand: periodic/source.py)."""

    name = "Periodic"

    def __init__(self, ticks: bool = True) -> None:
        self.ticks = ticks  # False: the entries never fire here (an in-process test worker)
        self._refresher: running_lock.LockRefresher | None = None
        self._ticker: ticker.Ticker | None = None

    def validate(self) -> None:
        entries.load()  # each bad COGWORKER_PERIODIC entry names itself and its field

    def middleware(self) -> tuple[Any, ...]:
        return (running_lock.RunningLockMiddleware(),)

    def start(self, ctx: RunContext) -> Sequence[Any]:
        self._refresher = running_lock.LockRefresher(ctx.ledger)
        if not self.ticks:
            return ()
        periodic = entries.load()
        # Always a ticker: entries may be added in the admin at any time (source.py).
        self._ticker = t = ticker.Ticker(
            periodic,
            database=source.DatabaseEntries(reserved=[e.name for e in periodic]),
            ready=ctx.recovered_once,
            started_at=ctx.started_at,
            identity=ctx.identity,
        )
        t.announce()
        # A chore: it goes on while running jobs finish at a stop (rule 16).
        return (Chore("periodic", t.run, t.interval),)

    def renamed(self, ctx: RunContext) -> None:
        if self._ticker is not None:
            self._ticker.rename(ctx.identity)

    def exit(self, ctx: RunContext) -> None:
        if self._ticker is not None:
            self._ticker.close()

    def beat(self, ctx: RunContext, beat: Beat) -> None:
        if self._refresher is not None:
            self._refresher(beat.conn, beat.recovering)


class Controls(Plugin):
    """Job controls: limiters around the run (leases refreshed by every beat, waiting
    jobs woken when there is room), cancel flags read on every beat."""

    name = "Controls"

    def __init__(self) -> None:
        self._leases = limits.LeaseRefresher()
        self._waker: LimitWaker | None = None

    def validate(self) -> None:
        from ..core import jobs

        # Every registered job's limiters exist in COGWORKER["LIMITS"] (a job module
        # imported before the settings were configured was not checked then).
        options.check_registered_jobs(jobs.registered_jobs())

    def middleware(self) -> tuple[Any, ...]:
        return (limits.LimitsMiddleware(),)

    def start(self, ctx: RunContext) -> Sequence[Any]:
        rt = runtime.current()
        rt.identity = ctx.identity  # written in this process's leases
        if not conf.get().LIMITS:
            return ()
        from .limit_waker import LimitWaker

        self._waker = LimitWaker(nudge=ctx.nudge)
        # Leases released and jobs parked in this process wake it.
        rt.limit_wake = self._waker.wake_for
        return (self._waker,)

    def renamed(self, ctx: RunContext) -> None:
        runtime.current().identity = ctx.identity  # leases taken from here on

    def exit(self, ctx: RunContext) -> None:
        rt = runtime.current()
        if self._waker is not None and rt.limit_wake == self._waker.wake_for:
            rt.limit_wake = None

    def beat(self, ctx: RunContext, beat: Beat) -> None:
        try:
            self._leases(beat.conn, beat.recovering)
        finally:
            cancel.watch_flags(beat.conn, ctx.watchdog)


class DjangoTasks(Plugin):
    """The django.tasks backend (Django 6.0+, when TASKS uses it): the apps' tasks
    modules imported at start, results and their signals around the run, this process's
    identity as the results' worker id, deferred result writes retried on each beat."""

    name = "django.tasks"

    def validate(self) -> None:
        from ..djtasks import worker_setup

        worker_setup.validate()

    def middleware(self) -> tuple[Any, ...]:
        from ..djtasks.middleware import TaskResultMiddleware

        return (TaskResultMiddleware(),)

    def start(self, ctx: RunContext) -> Sequence[Any]:
        from ..djtasks import worker_setup

        worker_setup.start(ctx.identity)
        return ()

    def renamed(self, ctx: RunContext) -> None:
        from ..djtasks import worker_setup

        worker_setup.start(ctx.identity)

    def exit(self, ctx: RunContext) -> None:
        from ..djtasks import worker_setup

        worker_setup.stop()

    def beat(self, ctx: RunContext, beat: Beat) -> None:
        from ..djtasks import available

        if available():
            from ..djtasks import store

            store.retry_pending(beat.conn)


class Workflows(Plugin):
    name = "Workflows"

    def middleware(self) -> tuple[Any, ...]:
        return (BatchMiddleware(),)  # batches: members' outcomes, callbacks


class KeyGuard(Plugin):
    """At start and every KEYGUARD_INTERVAL, in every process (rule 9)."""

    name = "Key guard"

    def timers(self, ctx: RunContext) -> Sequence[Timer]:
        guard = keyguard.timer(q.name for q in ctx.queues)
        return (("Key guard", conf.get().KEYGUARD_INTERVAL, guard),)


class Durable(Plugin):
    """The durable enqueue's outboxes relayed on every poll (a timer of interval 0), in
    every process; the relay's own thread ends with the worker."""

    name = "Durable outbox relay"

    def __init__(self) -> None:
        self._chore = chore.Chore()

    def start(self, ctx: RunContext) -> Sequence[Any]:
        return (_Stopped(self._chore.stop),)

    def timers(self, ctx: RunContext) -> Sequence[Timer]:
        return (("Durable outbox relay", 0.0, self._chore),)


class CodeWatch(Plugin):
    """The job modules' files, watched: one changed on disk since the start is logged
    once (the worker still runs the code it imported), and a payload naming a job this
    worker doesn't know says "restart the worker" when its module is newer than the
    worker's code (core/staleness.py)."""

    name = "Code watch"

    def __init__(self) -> None:
        self._watch: staleness.Watch | None = None

    def start(self, ctx: RunContext) -> Sequence[Any]:
        from ..core import jobs

        staleness.mark_loaded(ctx.started_at)
        modules = {f.func.__module__ for f in jobs.registered_jobs()}
        modules |= {name for name, _required in jobs.job_module_names()}
        self._watch = staleness.Watch(staleness.job_module_files(sorted(modules)))
        return ()

    def timers(self, ctx: RunContext) -> Sequence[Timer]:
        return (("Code watch", CODE_WATCH_INTERVAL, self._check),)

    def _check(self, _conn: redis.Redis) -> None:
        if self._watch is None:
            return
        for module, path in self._watch.changed():
            log.warning(
                "%s (%s) changed on disk since this worker started: it still runs the code "
                "it imported; restart the worker (in development, `manage.py cogworker "
                "--reload` restarts it on every change)",
                module,
                path,
            )


class _Stopped:
    """A component that only stops something (started by its first use)."""

    def __init__(self, stop: Callable[[], Any]) -> None:
        self.stop = stop

    def start(self) -> None:
        return None


def builtin() -> tuple[Plugin, ...]:
    """Every worker's plugins, in the order of its server chain (outermost first)."""
    return (
        History(),
        Telemetry(),
        Unique(),
        Periodic(),
        Controls(),
        DjangoTasks(),
        Workflows(),
        KeyGuard(),
        Durable(),
        CodeWatch(),
    )


def validate(plugins: Iterable[Plugin]) -> None:
    for plugin in plugins:
        plugin.validate()


def middleware_of(plugins: Sequence[Plugin]) -> Callable[[], tuple[Any, ...]]:
    """A factory of the plugins' server middleware, outermost first (one set per chain)."""
    return lambda: tuple(m for p in plugins for m in p.middleware())


def beat_hooks(
    plugins: Sequence[Plugin], ctx: RunContext
) -> list[tuple[str, Callable[[Beat], None]]]:
    """What the heartbeat calls after each beat: each plugin's ``beat``, bound to the
    run context, with the plugin's name to report a failure under (only plugins that
    define one)."""
    return [
        (p.name, functools.partial(p.beat, ctx)) for p in plugins if type(p).beat is not Plugin.beat
    ]


__all__ = [
    "Beat",
    "Plugin",
    "RunContext",
    "Timer",
    "beat_hooks",
    "builtin",
    "middleware_of",
    "validate",
]
