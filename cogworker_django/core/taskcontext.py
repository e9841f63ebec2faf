"""The run an ``async def`` job's task is in, on a worker's event loop (worker/aio.py).

A processor thread keeps its run in thread-locals (``jobs.current_job``,
``controls.runtime``, ``locks.run_abandoned``); every coroutine of the event loop shares
one thread, so there each run keeps them in a context variable instead: asyncio gives
every task a copy of the context it was created in, and the helpers the run's
middleware uses off the loop (worker/aio_chain.py) run in copies of the task's context.
The :class:`TaskRun` is one mutable object shared by all those copies: what one of them
writes (the run abandoned at shutdown, a database connection opened) every other sees.

The thread-locals stay first: a processor thread never reads this variable (the hot
path of plain jobs is unchanged); only a thread that set none of them falls back to it.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .progress import RunningJob


class TaskRun:
    """One async run's state, read through :data:`current`."""

    __slots__ = ("job", "runner", "state", "abandoned", "used_db")

    def __init__(self, job: RunningJob, runner: Any) -> None:
        self.job = job
        self.runner = runner
        self.state: Any = None  # its controls.runtime.RunState, while inside the job
        self.abandoned = False  # refused its settlement: the hand-over requeued it
        self.used_db = False  # a database connection was opened in the run's context


current: ContextVar[TaskRun | None] = ContextVar("cogworker_task_run", default=None)
