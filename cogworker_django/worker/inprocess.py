"""A worker inside the calling process, for tests: the launcher's parts (plugins, pool,
heartbeat, poller, orphan recovery), booted as ``manage.py cogworker`` boots them, with
no signal handlers and no wait for a signal.

    with InProcessWorker(queues=("default",), concurrency=2) as w:
        add.enqueue(1, 2)
        w.run_until(lambda: r.get("total") == "3")

Use it for run-layer logic: settling, middleware, plugins, retries, the poller, limits.
Where a real process is the point (signals, SIGKILL, ``--processes``, forks, a worker
killed mid-job) start ``manage.py cogworker`` instead.

The project's periodic entries fire only with ``periodic=True``. ``tag`` is the
identity's first part (``--tag``; ``inprocess`` by default).

It runs against the Redis of ``COGWORKER`` (the pytest fixture ``cogworker_worker``
turns the test mode to real Redis). Its threads share the process with the test: a job
that never returns holds :meth:`stop` for the shutdown timeout, as in a real worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from .. import conf
from ..conf import QueueSpec
from . import plugins as plugin_list
from .launcher import Launcher
from .plugins import Plugin

T = TypeVar("T")

# How often run_until asks its predicate.
POLL = 0.01


class InProcessWorker:
    def __init__(
        self,
        *,
        queues: Iterable[str | QueueSpec] | None = None,
        concurrency: int | None = None,
        async_concurrency: int | None = None,
        fetch: str | None = None,
        shutdown_timeout: float | None = None,
        plugins: Sequence[Plugin] | None = None,
        periodic: bool = False,
        tag: str = "inprocess",
    ) -> None:
        s = conf.get()
        specs = tuple(
            q if isinstance(q, QueueSpec) else QueueSpec(str(q), 1)
            for q in (s.QUEUES if queues is None else queues)
        )
        if not specs:
            raise ValueError("an in-process worker needs at least one queue")
        if concurrency is None:
            concurrency = s.CONCURRENCY
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
        if plugins is None:
            # The periodic entries fire only when asked: a worker started by a test that
            # fired the project's cron entries (the latest slot fires at start, within
            # PERIODIC_GRACE) would run jobs the test never enqueued.
            plugins = tuple(
                plugin_list.Periodic(ticks=False)
                if isinstance(p, plugin_list.Periodic) and not periodic
                else p
                for p in plugin_list.builtin()
            )
        self.plugins = tuple(plugins)
        self.launcher = Launcher(
            concurrency=concurrency,
            async_concurrency=async_concurrency,
            queues=specs,
            fetch_mode=fetch or s.FETCH,
            tag=tag,
            shutdown_timeout=s.SHUTDOWN_TIMEOUT if shutdown_timeout is None else shutdown_timeout,
            plugins=self.plugins,
        )
        self._state = "new"

    @property
    def identity(self) -> str:
        return self.launcher.identity

    @property
    def manager(self) -> Any:
        return self.launcher.manager

    def start(self) -> InProcessWorker:
        """Validate the plugins (as the command does), write the first beat and start
        every part. Raises what the boot raises (Redis unreachable, bad settings)."""
        if self._state != "new":
            raise RuntimeError(f"this in-process worker was already started ({self._state})")
        plugin_list.validate(self.plugins)
        self._state = "running"
        try:
            self.launcher.boot()
        except BaseException:
            self._state = "failed"
            raise
        return self

    def run_until(self, predicate: Callable[[], T], timeout: float = 10.0, message: str = "") -> T:
        """Wait until ``predicate()`` returns something truthy, and return it; raise
        ``TimeoutError`` after ``timeout`` seconds (an exception from the predicate is
        raised at once)."""
        if self._state != "running":
            raise RuntimeError(f"the in-process worker is not running ({self._state})")
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(message or f"not true after {timeout}s: {predicate!r}")
            time.sleep(POLL)

    def stop(self) -> None:
        """Stop as on TERM: no job fetched from now, running jobs waited for up to the
        shutdown timeout, everything unfinished handed back; the plugins' ``exit``, the
        presence removed. Safe to call twice."""
        if self._state != "running":
            return
        self._state = "stopped"
        self.launcher.manager.begin_stop()
        self.launcher.shutdown()

    def __enter__(self) -> InProcessWorker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


__all__ = ["InProcessWorker"]
