"""What a running job asks about its own cancellation (``api.cancel``), and the worker's
look at the cancel flags on every beat."""

from __future__ import annotations

import logging
from typing import Any

from ..store import errors, keys
from .errors import JobCancelled
from .runtime import cancelled

__all__ = ["cancelled", "check_cancelled", "watch_flags"]

log = logging.getLogger("cogworker_django")


def check_cancelled() -> None:
    """Raise ``JobCancelled`` if the running job has been cancelled."""
    if cancelled():
        raise JobCancelled()


def watch_flags(conn: Any, watchdog: Any) -> None:
    """Flag the runs in a job here whose jid ``api.cancel`` put in ``P:cancels`` (the
    admin's signal says so at once; this catches a missed signal and a run that entered
    its job after the signal came). ``watchdog`` is the worker's (worker/timeouts.py);
    None for a pool without one."""
    if watchdog is None:
        return
    jids = sorted(watchdog.running_jids())
    if not jids:
        return
    pipe = conn.pipeline(transaction=False)
    for jid in jids:
        pipe.zscore(keys.cancels(), jid)
    for jid, score in zip(jids, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(score, Exception):
            if errors.is_unavailable(score):
                raise score
            log.error("cancel flags not read: %s", errors.describe(score))
            return
        if score is not None:
            watchdog.cancel(jid)
