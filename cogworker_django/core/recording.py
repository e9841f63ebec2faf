"""The record of jobs that ``testing.fake()`` (or ``TESTING = "fake"``) keeps instead of
pushing them to Redis: a list in this process's memory, oldest first.

Below both ``jobs`` (whose job functions read their own recorded jobs) and ``testing``
(which installs the fake and inline sinks in ``client``), so neither needs the other.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from . import payload

_lock = threading.RLock()
_recorded: list[dict[str, Any]] = []


def record(job: dict[str, Any]) -> str | None:
    """Keep ``job`` (through JSON, as Redis would); None for a duplicate of a unique job
    still recorded, refused as a real push would be (docs/unique.md)."""
    job = json.loads(payload.encode(job))
    with _lock:
        if _holds_lock(job) and any(
            _holds_lock(j) and j["unique_digest"] == job["unique_digest"] for j in _recorded
        ):
            return None
        _recorded.append(job)
    jid: str = job["jid"]
    return jid


def _holds_lock(job: dict[str, Any]) -> bool:
    # Unique jobs locked from the push hold their lock while recorded (no TTL here).
    return job.get("unique") in ("until_executed", "until_started") and bool(
        job.get("unique_digest")
    )


def recorded(func: str | None = None) -> list[dict[str, Any]]:
    """Recorded jobs (of one job's dotted path, or all), oldest first."""
    with _lock:
        return [j for j in _recorded if func is None or j["func"] == func]


def clear(func: str | None = None) -> None:
    with _lock:
        _recorded[:] = [j for j in _recorded if func is not None and j["func"] != func]


def take_oldest(func: str | None = None) -> dict[str, Any] | None:
    with _lock:
        for i, job in enumerate(_recorded):
            if func is None or job["func"] == func:
                return _recorded.pop(i)
    return None


# How a recorded (or inline) job runs: f(job, perform) -> result. testing installs the
# workflows' bookkeeping (workflows/local.py); plain ``perform(job)`` until then.
_runner: Callable[[dict[str, Any], Callable[[dict[str, Any]], Any]], Any] | None = None


def set_runner(fn: Callable[[dict[str, Any], Callable[[dict[str, Any]], Any]], Any]) -> None:
    global _runner
    _runner = fn


def run(job: dict[str, Any], perform: Callable[[dict[str, Any]], Any]) -> Any:
    """Run a job of the test modes with ``perform`` (jobs.perform), through the runner."""
    return perform(job) if _runner is None else _runner(job, perform)
