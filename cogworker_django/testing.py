"""Testing helpers: run your code's ``enqueue`` calls without a worker.

``fake()`` records pushed jobs instead of sending them to Redis; ``inline()`` runs each
job the moment it is enqueued. Jobs pass through JSON on the way, as they would
through Redis, so a test fails on arguments a real push would refuse.

    with testing.fake():
        send_welcome.enqueue(1)
        assert len(send_welcome.jobs) == 1
        send_welcome.drain()
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

from . import client, payload

_lock = threading.RLock()
_recorded: list[dict[str, Any]] = []


def _record(job: dict[str, Any]) -> str | None:
    job = json.loads(payload.encode(job))
    with _lock:
        if _holds_lock(job) and any(
            _holds_lock(j) and j["unique_digest"] == job["unique_digest"] for j in _recorded
        ):
            return None  # a duplicate, refused as a real push would be (docs/unique.md)
        _recorded.append(job)
    return job["jid"]


def _holds_lock(job: dict[str, Any]) -> bool:
    # Unique jobs locked from the push hold their lock while recorded (no TTL here).
    return job.get("unique") in ("until_executed", "until_started") and bool(
        job.get("unique_digest")
    )


def _run_now(job: dict[str, Any]) -> str:
    from . import jobs

    job = json.loads(payload.encode(job))
    job.pop("at", None)
    jobs.perform(job)
    return job["jid"]


def diverter_for(mode: str):
    return _record if mode == "fake" else _run_now


@contextlib.contextmanager
def _divert(fn) -> Iterator[None]:
    previous = client.set_diverter(fn)
    try:
        yield
    finally:
        client.set_diverter(previous)


@contextlib.contextmanager
def fake() -> Iterator[None]:
    """Record jobs instead of pushing them; the record is cleared on entry and exit."""
    clear()
    with _divert(_record):
        try:
            yield
        finally:
            clear()


@contextlib.contextmanager
def inline() -> Iterator[None]:
    """Run each job synchronously when it is enqueued (exceptions reach the caller)."""
    with _divert(_run_now):
        yield


def recorded(func: str | None = None) -> list[dict[str, Any]]:
    """Recorded jobs (of one job's dotted path, or all), oldest first."""
    with _lock:
        return [j for j in _recorded if func is None or j["func"] == func]


def clear(func: str | None = None) -> None:
    with _lock:
        _recorded[:] = [j for j in _recorded if func is not None and j["func"] != func]


def _take_oldest(func: str | None) -> dict[str, Any] | None:
    with _lock:
        for i, job in enumerate(_recorded):
            if func is None or job["func"] == func:
                return _recorded.pop(i)
    return None


def perform_one(func: str | None = None) -> Any:
    """Run the oldest recorded job (of ``func``, or of any job); returns its result."""
    from . import jobs

    job = _take_oldest(func)
    if job is None:
        raise LookupError(f"no recorded job{' of ' + func if func else ''} to perform")
    return jobs.perform(job)


def drain(func: str | None = None) -> int:
    """Run recorded jobs (of ``func``, or all) until none is left, including the jobs
    they enqueue; returns how many ran."""
    count = 0
    while (job := _take_oldest(func)) is not None:
        from . import jobs

        jobs.perform(job)
        count += 1
    return count
