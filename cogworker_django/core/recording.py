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

from ..store import runtime
from . import payload, progress, results, tracebacks

_lock = threading.RLock()


class _Recorded(list[dict[str, Any]]):
    """The jobs recorded, oldest first: the runtime's (store/runtime.py)."""


def _recorded() -> _Recorded:
    return runtime.current().of(_Recorded)


def record(job: dict[str, Any]) -> str | None:
    """Keep ``job`` (through JSON, as Redis would); None for a duplicate of a unique job
    still recorded, refused as a real push would be (docs/unique.md)."""
    job = json.loads(payload.encode(job))
    with _lock:
        if _holds_lock(job) and any(
            _holds_lock(j) and j["unique_digest"] == job["unique_digest"] for j in _recorded()
        ):
            return None
        _recorded().append(job)
    jid: str = job["jid"]
    results.place_local(jid, "scheduled" if job.get("at") is not None else "queued")
    return jid


def _holds_lock(job: dict[str, Any]) -> bool:
    # Unique jobs locked from the push hold their lock while recorded (no TTL here).
    return job.get("unique") in ("until_executed", "until_started") and bool(
        job.get("unique_digest")
    )


def recorded(func: str | None = None) -> list[dict[str, Any]]:
    """Recorded jobs (of one job's dotted path, or all), oldest first."""
    with _lock:
        return [j for j in _recorded() if func is None or j["func"] == func]


def clear(func: str | None = None) -> None:
    with _lock:
        kept = _recorded()
        kept[:] = [j for j in kept if func is not None and j["func"] != func]
        if func is None:
            results.clear_local()


def take_oldest(func: str | None = None) -> dict[str, Any] | None:
    with _lock:
        kept = _recorded()
        for i, job in enumerate(kept):
            if func is None or job["func"] == func:
                job = kept.pop(i)
                results.place_local(job["jid"], "running")
                return job
    return None


# How a recorded (or inline) job runs: f(job, perform) -> result. testing installs the
# workflows' bookkeeping (workflows/local.py); plain ``perform(job)`` until then.
# (Registered for the process's life: store/runtime.registered.)
class _Runner:
    fn: Callable[[dict[str, Any], Callable[[dict[str, Any]], Any]], Any] | None = None


def set_runner(fn: Callable[[dict[str, Any], Callable[[dict[str, Any]], Any]], Any]) -> None:
    runtime.registered(_Runner).fn = fn


def run(job: dict[str, Any], perform: Callable[[dict[str, Any]], Any]) -> Any:
    """Run a job of the test modes with ``perform`` (jobs.perform), through the runner;
    its outcome is kept here as a worker keeps it in Redis (JobRef reads it)."""
    job = progress.RunningJob(job)  # current_job() is this dict: its progress is kept
    try:
        runner = runtime.registered(_Runner).fn
        value = perform(job) if runner is None else runner(job, perform)
    except BaseException as exc:
        _keep(job, results.ended(job, _status_of(exc), error=_error(exc)))
        raise
    _keep(job, results.ended(job, "succeeded", value=value))
    return value


def _status_of(exc: BaseException) -> str:
    # A test mode runs a job once: its failure is final, unless the job itself stopped
    # it (Discard, JobCancelled).
    status = getattr(type(exc), "history_status", None)
    return status if status in ("discarded", "cancelled") else "dead"


def _error(exc: BaseException) -> tuple[str, str, str]:
    return payload.error_class(exc), payload.error_message(exc), tracebacks.traceback_text(exc)


def _keep(job: progress.RunningJob, ended: results.Ended | None) -> None:
    """The run's outcome, kept in memory as a worker keeps it in Redis (results.read)."""
    fields = dict(zip(ended.fields[0::2], ended.fields[1::2], strict=True)) if ended else {}
    if job.last_progress is not None:
        fields["progress"] = json.dumps(job.last_progress)
    if fields:
        results.keep_local(job.jid, fields)
