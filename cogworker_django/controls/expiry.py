"""``expires_in``: a job whose first run has not started by its ``expires_at`` is dropped
when a worker takes it (never run, acked, logged, counted, recorded as expired).

Only a job that never started is checked: a retry or a job recovered from a dead
worker has started already, and a half-done job must be allowed to finish. A job a
limiter sent back to the schedule never started, so it can expire while it waits.
"""

from __future__ import annotations

import math
from typing import Any


def expired(job: dict[str, Any], now: float) -> bool:
    at = job.get("expires_at")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
        return False
    if _count(job.get("retry_count")) or _count(job.get("orphan_count")):
        return False
    return now >= at


def _count(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
