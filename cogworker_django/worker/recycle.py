"""Recycling (``--max-jobs N``, ``--max-memory MiB``): against leaks in job code, a
process that has started N jobs, or whose RSS has passed the limit, stops fetching,
finishes its running jobs, hands back what it holds and exits 0, for systemd, Kubernetes
or the ``--processes`` supervisor to start a fresh one.

Duties:
- count the runs (a server middleware, innermost of the built-ins: a run a limiter
  refused is not counted) and, at the Nth, ask for the recycle at once, so that no
  further job is fetched;
- read the RSS after each heartbeat (the plugin's ``beat``);
- say why, once, through the ``on_due`` the launcher gives (which quiets the process and
  stops it once its running jobs are done: the same path as TSTP then TERM).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from .heartbeat import Beat
from .plugins import Plugin, RunContext

log = logging.getLogger("cogworker_django")

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mib() -> float | None:
    """This process's resident set size in MiB (None where /proc can't tell: not Linux)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 2**20
    except (OSError, ValueError, IndexError):
        return None


class Recycler:
    """When this process should recycle, and why (``reason``: "" until then)."""

    def __init__(self, max_jobs: int | None = None, max_memory: int | None = None) -> None:
        self.max_jobs = max_jobs
        self.max_memory = max_memory  # MiB of RSS
        self.reason = ""
        self._runs = itertools.count(1)  # next() is atomic: the processors share it
        self._once = itertools.count()  # the first next() is 0: one caller says why
        self._on_due: Callable[[str], Any] | None = None

    def bind(self, on_due: Callable[[str], Any]) -> None:
        """``on_due(reason)`` is called once, when the process should recycle."""
        self._on_due = on_due

    def run_started(self) -> None:
        if self.max_jobs is not None and next(self._runs) == self.max_jobs:
            self._due(f"{self.max_jobs} jobs started (--max-jobs {self.max_jobs})")

    def check_memory(self) -> None:
        if self.max_memory is None:
            return
        rss = rss_mib()
        if rss is not None and rss > self.max_memory:
            self._due(f"RSS {rss:.0f} MiB passed --max-memory {self.max_memory} MiB")

    def _due(self, reason: str) -> None:
        if next(self._once):
            return
        self.reason = reason
        if self._on_due is not None:
            self._on_due(reason)


class RecycleMiddleware:
    """Counts each run as it starts (in the chain of plain and async runs alike)."""

    def __init__(self, recycler: Recycler) -> None:
        self.recycler = recycler

    def __call__(self, job: dict[str, Any], queue: str, run: Callable[[], Any]) -> Any:
        self.recycler.run_started()
        return run()

    async def acall(self, job: dict[str, Any], queue: str, run: Callable[[], Any]) -> Any:
        self.recycler.run_started()
        return await run()


class Recycle(Plugin):
    name = "Recycle"

    def __init__(self, recycler: Recycler) -> None:
        self.recycler = recycler

    def middleware(self) -> tuple[Any, ...]:
        if self.recycler.max_jobs is None:
            return ()
        return (RecycleMiddleware(self.recycler),)

    def start(self, ctx: RunContext) -> Sequence[Any]:
        limit, rss = self.recycler.max_memory, rss_mib()
        if limit is not None and (rss is None or rss > limit):
            # Recycled at once, its replacement would be too, for ever: the limit is off.
            self.recycler.max_memory = None
            log.error(
                "--max-memory %d MiB ignored: %s",
                limit,
                "this system does not say a process's RSS (/proc)"
                if rss is None
                else f"this process uses {rss:.0f} MiB already at its start",
            )
        return ()

    def beat(self, ctx: RunContext, beat: Beat) -> None:
        self.recycler.check_memory()
