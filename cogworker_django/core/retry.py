"""Retry control from inside a job: which errors are retried (``retry_on``), how long
before each retry (``retry_in``), ``raise Retry(in_=)`` and ``raise Discard(reason)``,
and the job enqueued when a run ends in dead (``on_dead``).

The options are the ``@job`` decorator's only: they name classes, callables and
signatures, which can't travel in a payload, so a worker reads them from the registered
function (``retry_on`` and ``retry_in`` given to ``using()`` are refused, saying so).
Everything here is checked when the decorator runs, with errors naming the option; at
run time a ``retry_in`` callable that raises or answers something other than a finite
number of seconds >= 0 is replaced by the default backoff (logged once per job), never
losing the failure it was asked about (worker/failures.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..store import errors
from ..store.codec import number
from ..store.errors import CogworkerError

log = logging.getLogger("cogworker_django")

# The options of this module (core/jobs.py adds them to the decorator's).
OPTION_NAMES = ("retry_on", "retry_in", "on_dead")
# The keyword an on_dead job is given: the jid of the job that ended in dead.
DEAD_JID = "dead_jid"


class Retry(CogworkerError):  # noqa: N818 - a control-flow signal, as Celery's Retry
    """Raised by a job: run it again in ``in_`` seconds (a number >= 0; None: the job's
    ``retry_in``, else the default backoff). It counts as an attempt: past the job's
    ``retry`` count the job goes to dead."""

    history_status = "retry"

    def __init__(self, in_: float | None = None, reason: str = "") -> None:
        if in_ is not None:
            seconds = number(in_)
            if seconds is None or seconds < 0:
                raise ValueError(
                    f"Retry(in_=...) must be a finite number of seconds >= 0, got {in_!r}"
                )
        self.in_ = in_
        self.reason = reason
        super().__init__(reason or (f"retry in {in_:g} s" if in_ is not None else "retry"))


class Discard(CogworkerError):  # noqa: N818 - a control-flow signal
    """Raised by a job: stop here, with no retry and not in dead; the run is recorded as
    ``discarded`` with ``reason`` (history, the kept result)."""

    history_status = "discarded"

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason or "discarded")


def check_options(where: str, opts: dict[str, Any]) -> None:
    """Refuse a bad ``retry_on``, ``retry_in`` or ``on_dead`` (ValueError or TypeError
    naming the option)."""
    retry_on = opts.get("retry_on")
    if retry_on is not None:
        classes = retry_on if isinstance(retry_on, (tuple, list)) else (retry_on,)
        if not classes or not all(
            isinstance(c, type) and issubclass(c, BaseException) for c in classes
        ):
            raise TypeError(
                f"{where}: retry_on must be an exception class or a tuple of them, got {retry_on!r}"
            )
    retry_in = opts.get("retry_in")
    if retry_in is not None and not callable(retry_in):
        steps = retry_in if isinstance(retry_in, (list, tuple)) else [retry_in]
        bad = [s for s in steps if (n := number(s)) is None or n < 0 or isinstance(s, bool)]
        if not steps or bad:
            raise ValueError(
                f"{where}: retry_in must be seconds >= 0, a list of them (one per retry, the "
                f"last repeated), or a callable (attempt, exc) -> seconds; got {retry_in!r}"
            )
    on_dead = opts.get("on_dead")
    if on_dead is not None:
        from ..workflows.signatures import Signature

        if not isinstance(on_dead, Signature):
            raise TypeError(f"{where}: on_dead must be a signature (job.s(...)), got {on_dead!r}")
        if on_dead.unique:
            raise ValueError(
                f"{where}: on_dead can't be a unique job ({on_dead.func}, "
                f"unique={on_dead.unique!r}): its lock is not taken by the filing that pushes it"
            )
        if DEAD_JID in on_dead.kwargs:
            raise ValueError(f"{where}: on_dead is given {DEAD_JID}= itself (it is the dead job's)")
        enqueuer = on_dead.enqueuer
        fn = getattr(enqueuer, "_fn", None)
        if fn is not None:
            try:
                fn.check_call(on_dead.args, {**on_dead.kwargs, DEAD_JID: "x"})
            except TypeError as exc:
                raise TypeError(
                    f"{where}: on_dead's job must take the keyword {DEAD_JID}= (the dead "
                    f"job's jid): {errors.safe_str(exc)}"
                ) from None


def retried(opts: dict[str, Any], exc: BaseException | None) -> bool:
    """Whether a failure with ``exc`` may be retried under ``retry_on`` (a ``Retry`` always
    may; without ``retry_on`` every error may)."""
    retry_on = opts.get("retry_on")
    if retry_on is None or exc is None or isinstance(exc, Retry):
        return True
    classes = tuple(retry_on) if isinstance(retry_on, (list, tuple)) else (retry_on,)
    return isinstance(exc, classes)


def delay(
    opts: dict[str, Any],
    attempt: int,
    exc: BaseException | None,
    default: Callable[[int], float],
    func: str = "",
) -> float:
    """Seconds before retry number ``attempt`` (1 for the first): ``Retry(in_=)``'s, else
    ``retry_in``'s, else ``default(attempt)``. Never raises."""
    if isinstance(exc, Retry) and exc.in_ is not None:
        return float(exc.in_)
    retry_in = opts.get("retry_in")
    if retry_in is None:
        return default(attempt)
    if callable(retry_in):
        try:
            answer = number(retry_in(attempt, exc))
        except Exception as err:  # noqa: BLE001 - a broken hook must not lose the failure
            _hook_failed(func, errors.describe(err))
            return default(attempt)
        if answer is None or answer < 0:
            _hook_failed(func, "it did not return a finite number of seconds >= 0")
            return default(attempt)
        return answer
    steps: Sequence[Any] = retry_in if isinstance(retry_in, (list, tuple)) else [retry_in]
    value = number(steps[min(max(attempt, 1), len(steps)) - 1])
    return value if value is not None and value >= 0 and math.isfinite(value) else default(attempt)


def _hook_failed(func: str, problem: str) -> None:
    if not errors.first_time("retry_in", func, problem.split(":", 1)[0]):
        return
    log.error(
        "%s: its retry_in failed (%s): the default backoff is used instead (logged once)",
        func,
        problem,
    )
