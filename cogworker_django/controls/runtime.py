"""The controls of the run in progress on this thread: what ``cancelled()`` reads.

The worker binds a :class:`RunState` to the processor thread for the job function's
duration (worker/timeouts.py); outside a worker run (a plain call, the test modes, a
web request) there is none, and ``cancelled()`` is False.
"""

from __future__ import annotations

import threading

from ..core import taskcontext


class RunState:
    """One run: shared by its thread, the worker's watchdog and the heartbeat."""

    __slots__ = ("jid", "func", "timeout", "cancel_requested", "thread_id")

    def __init__(self, jid: str, func: str, timeout: float | None) -> None:
        self.jid = jid
        self.func = func
        self.timeout = timeout
        self.cancel_requested = False  # set once by the watchdog (a plain store: atomic)
        self.thread_id = threading.get_ident()


_local = threading.local()


def current() -> RunState | None:
    state = getattr(_local, "state", None)
    if state is None:  # not a processor thread's run: an async one's (taskcontext.py)?
        run = taskcontext.current.get()
        return run.state if run is not None else None
    return state


def bind(state: RunState | None) -> RunState | None:
    """Make ``state`` this thread's run; returns the previous one."""
    previous = getattr(_local, "state", None)
    _local.state = state
    return previous


def cancelled() -> bool:
    """Inside a worker run: True once the job has been cancelled (``api.cancel``)."""
    state = current()
    return state is not None and state.cancel_requested
