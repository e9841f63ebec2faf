"""What happens to a job that failed: the retry backoff, and the payload filed in
``P:retry`` or ``P:dead``.

Backoff (seconds before retry number ``n``, n = 1, 2, ...)::

    n ** 4 + 15 + random(0, 10 * n)

about 16 s, 31 s, 96 s, 271 s, 640 s ... 4.5 days for the 25th: a default ``retry=True``
job keeps trying for about 25 days (table in docs/retries.md). ``COGWORKER["RETRY_BACKOFF"]`` names a function
``f(retry_count) -> seconds`` to use instead.
"""

from __future__ import annotations

import random
import time
from typing import Any

from django.utils.module_loading import import_string

from .. import conf, payload


def backoff(retry_count: int) -> float:
    path = conf.get().RETRY_BACKOFF
    if path:
        return float(import_string(path)(retry_count))
    return retry_count**4 + 15 + random.uniform(0, 10 * retry_count)


def record_error(job: dict[str, Any], error_class: str, message: str, trace: str = "") -> None:
    job["error_class"] = error_class
    job["error_message"] = message
    now = time.time()
    job.setdefault("first_failed_at", now)
    job["failed_at"] = now
    if trace:
        job["traceback"] = trace


def after_failure(job: dict[str, Any], exc: BaseException | None = None) -> tuple[str, float]:
    """Count the failure in ``job`` (in place) and say where it goes: ("retry", at) or
    ("dead", now)."""
    try:
        job["retry_count"] = int(job.get("retry_count") or 0) + 1
    except (TypeError, ValueError):
        job["retry_count"] = 1
    if exc is not None:
        record_error(
            job, payload.error_class(exc), payload.error_message(exc), payload.traceback_text(exc)
        )
    if payload.retries_exhausted(job):
        return "dead", time.time()
    return "retry", time.time() + backoff(job["retry_count"])


def to_dead(job: dict[str, Any], error_class: str, message: str) -> tuple[str, float]:
    """File ``job`` straight in dead with this error (unregistered, poison, unparseable)."""
    record_error(job, error_class, message)
    return "dead", time.time()


def dead_trim() -> tuple[float, int]:
    """(drop scores below this, keep at most this many) for the dead set."""
    s = conf.get()
    return time.time() - s.DEAD_TIMEOUT, s.DEAD_MAX_JOBS
