"""Boot order, signals and shutdown of one worker process.

Boot: settings and options are validated (by the command), job modules imported,
periodic callables resolved on this main thread (rule 10), the fetch mode chosen, the
first heartbeat written synchronously, then the processors and the chores thread (the
poller, orphan recovery, the plugins' chores: background.Chores) start, and one summary
line is logged.

Shutdown: the stop order is one list (:meth:`Launcher.stop_steps`): what stops first
stops taking new work; the chores (periodic ticks among them: rule 16) go on until the
running jobs are done and handed over.

Signals: TERM/INT stop gracefully (a second one cuts the wait short: the hand-over still
runs, then the process exits), TSTP quiets, TTIN logs every thread's stack.

Recycling (``max_jobs``, ``max_memory``: recycle.py) is TSTP, then TERM once no job runs.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import functools
import logging
import os
import queue
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .. import __version__, conf
from ..conf import QueueSpec
from ..core import locks
from ..observe import stats
from ..store import cluster, connection, errors, naming
from . import fetch
from . import plugins as plugin_list
from .background import Chore, Chores
from .heartbeat import Heartbeat
from .manager import Manager
from .plugins import Plugin, RunContext
from .poller import Poller
from .recovery import OrphanRecovery, lifeline_pause
from .recycle import Recycle, Recycler

log = logging.getLogger("cogworker_django")

# A second TERM/INT this soon after the first is the same stop delivered twice (Ctrl-C
# reaches every process of the terminal's group, and systemd's default KillMode signals
# the whole cgroup, while the --processes supervisor also passes it on): not a request
# to cut the wait short.
DUPLICATE_SIGNAL_WINDOW = 1.0
# What the admin's Stop (over pub/sub) puts on the signal queue: a stop like TERM's.
ADMIN_STOP = "admin-stop"
# What a recycle (recycle.py) puts on the signal queue, once it has quieted the process.
RECYCLE = "recycle"
# How often a recycling process looks whether its running jobs are done.
RECYCLE_POLL = 0.1


def new_identity(tag: str = "") -> str:
    host = socket.gethostname().split(".")[0]
    parts = [host, str(os.getpid()), secrets.token_hex(4)]
    if tag:
        parts.insert(0, tag)
    return ":".join(parts).replace(" ", "_")


def choose_fetch_mode(requested: str, version: tuple[int, ...]) -> tuple[str, str | None]:
    """The fetch mode to run with, and a warning to log when it differs from the one
    requested: reliable fetch needs LMOVE (Redis 6.2)."""
    if requested == "basic":
        return "basic", None
    if version < connection.MIN_REDIS_VERSION:
        return "basic", (
            f"FETCH='reliable' needs Redis >= 6.2 (LMOVE); this one is "
            f"{'.'.join(map(str, version))}, so this worker uses basic fetch: a job taken "
            "by a worker that dies is lost"
        )
    return "reliable", None


def resolve_fetch_mode(requested: str, client: Any) -> str:
    version = connection.server_version(client) if requested != "basic" else ()
    mode, warning = choose_fetch_mode(requested, version)
    if warning:
        log.warning("%s", warning)
    return mode


class Launcher:
    def __init__(
        self,
        *,
        concurrency: int,
        async_concurrency: int | None = None,
        queues: tuple[QueueSpec, ...],
        fetch_mode: str,
        tag: str = "",
        shutdown_timeout: float,
        started_at: float | None = None,
        supervisor: int | None = None,
        plugins: Sequence[Plugin] | None = None,
        max_jobs: int | None = None,
        max_memory: int | None = None,
    ) -> None:
        self.concurrency = concurrency
        # Every feature that joins the worker, in the order of its server chain (plugins.py).
        self.plugins = tuple(plugin_list.builtin() if plugins is None else plugins)
        self.recycler: Recycler | None = None
        if max_jobs is not None or max_memory is not None:
            self.recycler = Recycler(max_jobs, max_memory)
            self.plugins += (Recycle(self.recycler),)  # innermost: counts what runs
        self.async_concurrency = (
            conf.get().ASYNC_CONCURRENCY if async_concurrency is None else async_concurrency
        )
        # A --processes child: the supervisor's pid. Once it is gone (killed, or died) this
        # process stops as on TERM: nothing would replace or stop it any more.
        self.supervisor = supervisor
        self.queues = queues
        self.requested_fetch = fetch_mode
        self.tag = tag
        self.shutdown_timeout = shutdown_timeout
        self.identity = new_identity(tag)
        # This process's start (epoch), as early as the command can take it: a periodic
        # slot due after it is this process's to fire (catch-up or not).
        self.started_at = started_at if started_at is not None else time.time()
        self._signals: queue.SimpleQueue[int | str] = queue.SimpleQueue()
        self._stopping = False
        self._stop_signal_at: float | None = None
        self._force = threading.Event()
        # The plugins' components with a lifecycle of their own (start, stop); their
        # chores go on the chores thread.
        self.components: list[Any] = []
        self.chores = Chores(connection.get_client)
        self.ctx: RunContext | None = None

    # Signals -----------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            now = time.monotonic()
            if self._stop_signal_at is None:
                self._stop_signal_at = now
            elif now - self._stop_signal_at < DUPLICATE_SIGNAL_WINDOW:
                return  # the first one, delivered twice
            else:
                self._force.set()  # second TERM/INT: stop waiting for running jobs
        self._signals.put(signum)

    def request_stop(self) -> None:
        """Stop from another thread (the admin's "stop")."""
        if self._stop_signal_at is None:
            self._stop_signal_at = time.monotonic()
        self._signals.put(ADMIN_STOP)

    def _install_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGTSTP, signal.SIGTTIN):
            signal.signal(sig, self._on_signal)

    # Run ---------------------------------------------------------------------------------

    def run(self) -> int:
        self._install_signals()
        # Every connection of this process carries its identity: the lifeline's evidence
        # (recovery.py). Not in boot(): the in-process worker shares its process's client.
        client = connection.get_client()
        if naming.name_connections(client, naming.client_name(self.identity)) and (
            cluster.is_cluster(client)
        ):
            connection.reset()  # rebuilt with the name on every node's connections
        self.boot()
        self._wait_for_stop()
        return self.shutdown()

    def boot(self) -> None:
        """Build this process's parts, write the first beat and start them (everything
        :meth:`run` does before it waits for a signal; the in-process worker of the
        tests, worker/inprocess.py, calls it without installing signal handlers)."""
        client = connection.get_client()
        mode = resolve_fetch_mode(self.requested_fetch, client)
        self.fetcher = fetch.for_mode(mode, self.identity, self.queues)
        self.manager = Manager(
            self.identity,
            self.fetcher,
            self.concurrency,
            self.async_concurrency,
            middleware=plugin_list.middleware_of(self.plugins),
        )
        self.ctx = RunContext(
            identity=self.identity,
            queues=self.queues,
            started_at=self.started_at,
            ledger=self.manager.ledger,
            watchdog=self.manager.watchdog,
            nudge=getattr(self.manager.source, "nudge", None),
            recovered_once=lambda: self.recovery.completed_once,
        )
        self.heartbeat = Heartbeat(
            self.manager,
            tag=self.tag,
            on_stop_signal=self.request_stop,
            hooks=plugin_list.beat_hooks(self.plugins, self.ctx),
            on_fenced=self._reidentify,
        )
        if self.recycler is not None:
            self.recycler.bind(self._recycle)
        self.recovery = OrphanRecovery(self.identity, self.heartbeat, self.queues[0].name)
        self.poller = Poller(self.recovery)
        plugin_chores: list[Chore] = []
        for plugin in self.plugins:
            for part in plugin.start(self.ctx):
                (plugin_chores if isinstance(part, Chore) else self.components).append(part)
            self.poller.timers.extend(plugin.timers(self.ctx))
        self.chores.add(self.poller.chore())
        # The lifeline: killed processes found in seconds (recovery.py).
        self.chores.add(Chore("Lifeline", self.recovery.lifeline, lifeline_pause(), first_at=1.0))
        for chore in plugin_chores:
            self.chores.add(chore)

        self.heartbeat.start()
        s = conf.get()
        # Logged before the first job can start, so no job's output comes before it.
        log.info(
            "cogworker %s started: identity=%s pid=%d concurrency=%d async_concurrency=%s "
            "queues=%s fetch=%s redis=%s parser=%s prefix=%s",
            __version__,
            self.identity,
            os.getpid(),
            self.concurrency,
            self.async_concurrency if self.manager.aio is not None else "off (basic fetch)",
            ",".join(f"{q.name}:{q.weight}" for q in self.queues),
            mode,
            connection.describe_target(),
            connection.parser_name(),
            s.PREFIX,
        )
        self.manager.start()
        self.chores.start()
        for c in self.components:
            c.start()

    def _reidentify(self) -> str:
        """This process was taken for dead while it stalled and its stamp dropped
        (heartbeat.py fenced its runs of the jobs recovered meanwhile): it carries on under
        a new identity, so that nothing a late recoverer of the old one does (moving its
        lists, freeing its leases, pushing its periodic claims) touches what it does from
        here. Its connections keep their name: the name is the process's (naming.py), and
        the new identity's presence carries it. Called on the heartbeat's thread."""
        conn = connection.get_client()
        identity = new_identity(self.tag)
        self.fetcher.rename(conn, identity, self.manager.ledger)
        self.identity = self.manager.identity = self.recovery.identity = identity
        self.heartbeat.renamed(conn, identity)
        assert self.ctx is not None  # (built by boot, before the heartbeat starts)
        self.ctx = dataclasses.replace(self.ctx, identity=identity)
        for each in self.plugins:
            errors.best_effort(each.name, functools.partial(each.renamed, self.ctx))
        return identity

    def _recycle(self, reason: str) -> None:
        """Called once by the recycler (a processor thread or the heartbeat's)."""
        log.warning("recycling: %s: no new jobs fetched; exiting once the running ones end", reason)
        self.heartbeat.recycling = reason  # the admin's Processes page shows it
        self.manager.quiet()
        self._signals.put(RECYCLE)

    def _wait_for_stop(self) -> None:
        recycling = False
        while True:
            if recycling and self.manager.busy_count() == 0:
                self.manager.begin_stop()
                log.info("recycling: no job running: stopping")
                self._stopping = True
                return
            try:
                signum = self._signals.get(timeout=RECYCLE_POLL if recycling else 1.0)
            except queue.Empty:
                if self.supervisor is not None and os.getppid() != self.supervisor:
                    self.manager.begin_stop()
                    log.warning(
                        "the supervisor (pid %d) is gone: stopping (waiting up to %ss for "
                        "running jobs)",
                        self.supervisor,
                        self.shutdown_timeout,
                    )
                    self._stopping = True
                    return
                continue
            if signum in (signal.SIGTERM, signal.SIGINT, ADMIN_STOP):
                self.manager.begin_stop()  # no job fetched or started from here
                log.info(
                    "%s: stopping (waiting up to %ss for running jobs)",
                    f"{signal.Signals(signum).name} received"
                    if isinstance(signum, int)
                    else "stop requested from the admin",
                    self.shutdown_timeout,
                )
                self._stopping = True
                return
            if signum == RECYCLE:
                recycling = True
            elif signum == signal.SIGTSTP:
                self.manager.quiet()
            elif signum == signal.SIGTTIN:
                dump_threads()

    def shutdown(self) -> int:
        """Stop the parts (after ``manager.begin_stop``): what TERM leads to."""
        for name, step in self.stop_steps():
            errors.best_effort(name, step)
        log.info("cogworker %s stopped", self.identity)
        return 0

    def stop_steps(self) -> list[tuple[str, Any]]:
        """The stop order: (name, step), each run in turn, best-effort."""
        ctx = self.ctx
        assert ctx is not None
        return [
            *(("Shutdown", c.stop) for c in self.components),
            # Running jobs finish (up to the shutdown timeout), the rest is handed over.
            ("Shutdown", lambda: self.manager.stop(self.shutdown_timeout, self._force)),
            # The chores went on meanwhile (a slot due during the drain fires: rule 16).
            ("Shutdown", self._stop_chores),
            # Last chance for releases deferred by a recent outage (they live in memory).
            ("Lock release", locks.retry_deferred),
            ("Stats flush", lambda: stats.flush(connection.get_client())),
            # What each plugin keeps in memory (history: the runs that finished meanwhile).
            *((p.name, functools.partial(p.exit, ctx)) for p in self.plugins),
            ("Heartbeat", self.heartbeat.stop),
            ("Heartbeat", self.heartbeat.remove_presence),
        ]

    def _stop_chores(self) -> None:
        self.chores.stop()
        self.chores.join(connection.longest_call())


def dump_threads() -> None:
    """TTIN: every thread's stack, to the log and stderr."""
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    import traceback

    for ident, frame in frames.items():
        stack = "".join(traceback.format_stack(frame))
        log.warning("thread %s (%s):\n%s", names.get(ident, "?"), ident, stack)
    try:
        faulthandler.dump_traceback(all_threads=True)
    except Exception:  # noqa: BLE001 - stderr may be closed
        pass


def stuck_threads() -> list[str]:
    return [
        t.name for t in threading.enumerate() if t.name.startswith("processor-") and t.is_alive()
    ]


__all__ = ["Launcher", "dump_threads", "new_identity", "stuck_threads"]
