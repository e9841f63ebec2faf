"""The exceptions of the job controls, each a ``CogworkerError``.

Each carries ``history_status``: how a run that ends with it is recorded in the run
history (history/recorder.py reads it) instead of "failed".
"""

from __future__ import annotations

from ..store.errors import CogworkerError, describe
from . import runtime


class JobTimeout(CogworkerError):
    """The run went past its ``timeout``: raised inside the job's thread by the worker
    (or the job was abandoned after the grace and filed with it). A failure like any
    other: retried, then dead."""

    history_status = "timeout"

    def __init__(self, message: str | None = None) -> None:
        # Raised by the interpreter with no arguments: the message comes from the run.
        if message is None:
            state = runtime.current()
            if state is not None and state.timeout:
                message = f"{state.func} ran past its timeout of {state.timeout:g} s"
            else:
                message = "the job ran past its timeout"
        super().__init__(message)


def while_unwinding(interruption: BaseException, exc: BaseException) -> BaseException:
    """The interruption (a JobTimeout) as the run's end, saying what else was raised as
    it unwound the job (a ``finally`` or ``except`` that raised): the run ended because
    of its time limit, and is filed and recorded so (not as the other error's failure)."""
    found = type(interruption)(f"{interruption}; then, while it unwound the job: {describe(exc)}")
    found.__cause__ = exc
    return found.with_traceback(exc.__traceback__)


def timeout_behind(exc: BaseException) -> BaseException:
    """``exc``, unless it was raised while a JobTimeout unwound the job (found in its
    chain of causes and contexts): then that timeout (:func:`while_unwinding`)."""
    if isinstance(exc, JobTimeout):
        return exc
    seen: set[int] = set()
    link = exc.__cause__ or exc.__context__
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, JobTimeout):
            return while_unwinding(link, exc)
        link = link.__cause__ or link.__context__
    return exc


class JobCancelled(CogworkerError):
    """The job was cancelled (``api.cancel``): raised by ``check_cancelled()``, or by the
    worker at the job's next interruption point after the cancel grace. Not retried."""

    history_status = "cancelled"

    def __init__(self, message: str | None = None) -> None:
        if message is None:
            state = runtime.current()
            who = f"{state.func} (jid {state.jid})" if state is not None else "the job"
            message = f"{who} was cancelled"
        super().__init__(message)


class JobExpired(CogworkerError):
    """What the history records for a job dropped unrun past its ``expires_in``."""

    history_status = "expired"


class OverLimit(CogworkerError):
    """``limit(name, wait=S)`` found no room within ``wait`` seconds."""

    def __init__(self, name: str, wait: float | None, detail: str = "") -> None:
        self.name = name
        self.wait = wait
        waited = f" within {wait:g} s" if wait is not None else ""
        super().__init__(f"limiter {name!r} is full{waited}" + (f": {detail}" if detail else ""))
