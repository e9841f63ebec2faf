"""One log line when a run starts and one when it ends, with its duration, as Sidekiq
writes them: at DEBUG, so ``manage.py cogworker -v 2`` (or a ``LOGGING`` level of DEBUG
for the ``cogworker_django`` logger) shows them and a worker at the default INFO pays
one level check per run. Failures are logged at WARNING by the processor anyway.

    start: testapp.jobs.send_welcome jid=7f3a... queue=default
    done: testapp.jobs.send_welcome jid=7f3a... queue=default 0.012s
    fail: testapp.jobs.send_welcome jid=7f3a... queue=default 0.004s ValueError
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("cogworker_django")


class RunLogMiddleware:
    """Built-in server middleware (outside the job's own middleware, so the duration is
    what the worker spent on the run)."""

    @staticmethod
    def active_now() -> bool:
        """Asked before each run (RunChain): at INFO the run does not pass through it."""
        return log.isEnabledFor(logging.DEBUG)

    def __call__(self, job: dict[str, Any], queue: str, run: Callable[[], Any]) -> Any:
        if not log.isEnabledFor(logging.DEBUG):
            return run()
        started = _start(job, queue)
        try:
            result = run()
        except BaseException as exc:
            _end(job, queue, started, exc)
            raise
        _end(job, queue, started)
        return result

    async def acall(self, job: dict[str, Any], queue: str, run: Callable[[], Any]) -> Any:
        """The same around an async run, on the worker's event loop (worker/aio_chain.py)."""
        started = _start(job, queue)
        try:
            result = await run()
        except BaseException as exc:
            _end(job, queue, started, exc)
            raise
        _end(job, queue, started)
        return result


def _start(job: dict[str, Any], queue: str) -> float:
    log.debug("start: %s jid=%s queue=%s", job.get("func"), job.get("jid"), queue)
    return time.perf_counter()


def _end(job: dict[str, Any], queue: str, started: float, exc: BaseException | None = None) -> None:
    func, jid, took = job.get("func"), job.get("jid"), time.perf_counter() - started
    if exc is None:
        log.debug("done: %s jid=%s queue=%s %.3fs", func, jid, queue, took)
    else:
        log.debug("fail: %s jid=%s queue=%s %.3fs %s", func, jid, queue, took, type(exc).__name__)
