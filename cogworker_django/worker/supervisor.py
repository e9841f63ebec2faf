"""How ``manage.py cogworker`` runs its worker processes: one (:func:`run_one`), or
``--processes N`` forked and supervised (:func:`run_processes`): signals passed on, a
child that dies replaced, every child's metrics served through the one port.

The metrics exporter of one process is bound here (a port that can't be bound is one
clear line, before any job is fetched) and started and stopped by the worker's
``Metrics`` plugin.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..observe import health, telemetry
from ..store import connection
from ..store.errors import CogworkerError
from . import plugins
from .heartbeat import Beat
from .launcher import Launcher
from .plugins import Plugin, RunContext

log = logging.getLogger("cogworker_django")

T = TypeVar("T")


class PortTaken(CogworkerError):
    """``--metrics-port`` can't be listened on (the command's one line)."""


def bound(make: Callable[[], T], metrics: tuple[int, str]) -> T:
    """``make()``: a metrics server; a port that can't be bound is :class:`PortTaken`."""
    try:
        return make()
    except OSError as exc:
        port, addr = metrics
        raise PortTaken(
            f"--metrics-port {port}: can't listen on {addr}:{port}: {exc.strerror or exc}"
        ) from None


class Metrics(Plugin):
    """``--metrics-port``: serves /metrics and /healthz while the worker runs, and tells
    /healthz's record of each beat that went through; a ``--processes`` child has no
    server of its own (the supervisor serves every child's), only its beat file
    (observe/health.py)."""

    name = "Metrics"

    def __init__(self, freshness: Any, exporter: Any = None) -> None:
        self.freshness = freshness  # a health.Freshness
        self.exporter = exporter  # a telemetry.Exporter, bound and not yet serving

    def start(self, ctx: RunContext) -> Sequence[Any]:
        if self.exporter is not None:
            self.exporter.start()
        return ()

    def beat(self, ctx: RunContext, beat: Beat) -> None:
        self.freshness.beat()

    def exit(self, ctx: RunContext) -> None:
        if self.exporter is not None:
            self.exporter.stop()


def run_one(
    kwargs: dict[str, Any], metrics: tuple[int, str] | None = None, beat_file: str | None = None
) -> int:
    """One worker process; with ``metrics`` it serves /metrics and /healthz; a
    ``--processes`` child touches ``beat_file`` at each beat (the supervisor's
    /healthz)."""
    if metrics or beat_file:
        freshness = health.Freshness(path=beat_file)
        exporter = None
        if metrics:
            port, addr = metrics
            exporter = bound(
                lambda: telemetry.worker_exporter(
                    port, kwargs["concurrency"], addr, freshness.answer
                ),
                metrics,
            )
        listed = kwargs.get("plugins") or plugins.builtin()
        kwargs = {**kwargs, "plugins": (*listed, Metrics(freshness, exporter))}
    return Launcher(**kwargs).run()


# Held while a child is forked (run_processes.spawn).
HELD_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGTSTP, signal.SIGTTIN})


def run_processes(
    kwargs: dict[str, Any], count: int, metrics: tuple[int, str] | None = None
) -> int:
    """Fork ``count`` workers and supervise them: signals are passed on, and a child that
    dies unexpectedly is replaced (its in-progress jobs are recovered as orphans). With
    ``metrics``, this process serves every child's metrics through the one port."""
    children: dict[int, int] = {}
    stopping = False
    supervision = None
    if metrics:
        port, addr = metrics
        supervision = bound(
            lambda: telemetry.Supervision(port, kwargs["concurrency"], addr, count), metrics
        )

    supervisor = os.getpid()

    def spawn(slot: int) -> None:
        # The stop signals are held while a child is forked and entered in ``children``:
        # a TERM arriving meanwhile (a replacement started as the stop begins) is passed
        # on to it too, and none is forked once the stop has begun.
        signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
        try:
            if stopping:
                return
            pid = os.fork()
            if pid == 0:
                run_child()
            children[pid] = slot
        finally:
            if os.getpid() == supervisor:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
        if supervision is not None:
            supervision.child_forked(pid)

    def run_child() -> None:
        # Until the child's own handlers are in (run_one), a TERM or INT stops it outright
        # (it has taken no job yet) and TSTP or TTIN is ignored: never the parent's
        # handler, which would pass the signal on to its siblings.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        for sig in (signal.SIGTSTP, signal.SIGTTIN):
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
        code = 1
        random.seed()  # a child's own jitter and queue order, not a copy of the parent's
        try:
            beat_file = supervision.child_started() if supervision is not None else None
            # The child stops by itself if this process dies (SIGKILL, OOM): it would
            # otherwise run on unsupervised, past deploys that stop the supervisor.
            code = run_one({**kwargs, "supervisor": supervisor}, beat_file=beat_file)
        finally:
            logging.shutdown()
            os._exit(code)

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping
        if signum in (signal.SIGTERM, signal.SIGINT):
            stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGTSTP, signal.SIGTTIN):
        signal.signal(sig, forward)
    connection.reset()  # the children build their own pools
    # What the parent has built so far is shared with the children copy-on-write: keep
    # the collector from walking (and so writing to) those pages in every child.
    gc.collect()
    gc.freeze()
    for first in range(count):
        spawn(first)
    log.info("supervising %d worker processes (pid %d)", count, os.getpid())
    worst = 0
    while children:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        slot = children.pop(pid, None)
        if supervision is not None:
            supervision.child_exited(pid)
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, code if code > 0 else 0)
        if slot is not None and not stopping:
            if code == 0:
                # It left on its own, done with its jobs: recycled (--max-jobs,
                # --max-memory) or stopped from the admin.
                log.info(
                    "worker process %d exited on its own (recycled, or stopped from the "
                    "admin); starting a replacement",
                    pid,
                )
            else:
                log.error("worker process %d exited with %s; starting a replacement", pid, code)
                time.sleep(1.0)  # a crash loop is not a busy loop
            spawn(slot)
    if supervision is not None:
        supervision.stop()
    return worst
