"""The server middleware chain around an async run, on the worker's event loop.

A server middleware is a sync callable, ``mw(job, queue, run)``, whose ``run()`` returns
when the job has run. Around a coroutine that can't be called on the loop (it would
block every other run until the job is done), so each link is run one of two ways:

- a middleware with an ``acall`` method, ``async def acall(self, job, queue, run)``
  where ``run`` is an async callable, is awaited on the loop. The built-ins that act
  on most runs (history, the run log, metrics and traces) have one, so a plain async
  job passes through its chain without leaving the loop;
- any other one runs on a helper thread, in a copy of the run's context; its ``run()``
  schedules the rest of the chain on the loop and waits for it. The middleware sees the
  run as it would a sync one (its result, its exception, its duration), but the run
  holds a helper thread while it waits. The built-ins that do Redis work around a run
  (unique locks, periodic running locks, limiters, batches, django.tasks results) run
  this way: what they do before and after the job is blocking I/O, never on the loop.

The job itself (the innermost link) always runs on the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections

if TYPE_CHECKING:
    from .aio_side import Side


async def run(
    links: tuple[Any, ...],
    job: dict[str, Any],
    queue: str,
    perform: Callable[[], Awaitable[Any]],
    side: Side,
) -> Any:
    """``perform()`` through ``links``, outermost first."""
    n = len(links)

    async def call(i: int) -> Any:
        if i == n:
            return await perform()
        link = links[i]
        acall = getattr(link, "acall", None)
        if acall is not None:
            return await acall(job, queue, lambda: call(i + 1))
        return await _on_helper(link, job, queue, lambda: call(i + 1), side)

    return await call(0)


async def _on_helper(
    link: Any,
    job: dict[str, Any],
    queue: str,
    rest: Callable[[], Coroutine[Any, Any, Any]],
    side: Side,
) -> Any:
    loop = side.loop

    def run_rest() -> Any:
        # The rest of the chain, back on the loop (a task in this run's context).
        return asyncio.run_coroutine_threadsafe(rest(), loop).result()

    def around() -> Any:
        try:
            return link(job, queue, run_rest)
        finally:
            close_old_connections()  # what the middleware opened on this thread

    return await in_helper(side, around)


async def in_helper(side: Side, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a helper thread, in a copy of the calling task's context (the
    run's: taskcontext.py), awaited without blocking the loop."""
    context = contextvars.copy_context()
    return await side.loop.run_in_executor(side.executor, context.run, fn, *args)
