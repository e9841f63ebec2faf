"""Unique jobs: digests and their owner-checked locks.

``until_executed``: lock taken with the push (one script), held until success or the
terminal failure, extended on a retried failure, released whenever the job leaves by
another path. ``until_started``: lock taken with the push, released when a processor
takes the job. ``while_executing``: lock taken when the run starts; a run that finds
it held is rescheduled after :data:`WHILE_EXECUTING_RETRY_DELAY` instead.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any

from . import connection, keys, locks, payload, scripts

# Seconds a while_executing job waits before trying again when another run holds the lock.
WHILE_EXECUTING_RETRY_DELAY = 5.0
PUSH_LOCKED = ("until_executed", "until_started")


def digest(func: str, args: Any, kwargs: Any, queue: str) -> str:
    """Stable over key order and whitespace: canonical JSON, then SHA-256."""
    canonical = json.dumps(
        [func, list(args), dict(kwargs), queue],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def lock_key(job: dict[str, Any]) -> str | None:
    d = job.get("unique_digest")
    return keys.unique(d) if isinstance(d, str) and d else None


def _ttl(job: dict[str, Any], now: float) -> int:
    ttl = float(job.get("unique_for") or 0) or 86400.0
    at = job.get("at")
    if at is not None:
        ttl += max(0.0, float(at) - now)  # a scheduled job locks from the push
    return max(1, math.ceil(ttl))


def _script_args(job: dict[str, Any]) -> tuple[list[str], list[Any]]:
    now = time.time()
    scheduled = job.get("at") is not None and float(job["at"]) > now
    if not scheduled:
        job.pop("at", None)
        job["enqueued_at"] = now
    target = keys.schedule() if scheduled else keys.queue(job["queue"])
    data = payload.encode(job)
    return (
        [lock_key(job), target, keys.queues()],
        [
            job["jid"],
            _ttl(job, now),
            data,
            repr(float(job["at"])) if scheduled else "",
            job["queue"],
        ],
    )


def push(job: dict[str, Any]) -> str | None:
    """Push a job whose lock is taken with the push; None when it is a duplicate."""
    k, a = _script_args(job)
    pushed = scripts.run("unique_push", connection.get_client(), k, a)
    return job["jid"] if pushed else None


def queue_push(pipe: Any, job: dict[str, Any]) -> None:
    """Queue :func:`push` on a bulk pipeline (see client.push_many)."""
    k, a = _script_args(job)
    scripts.get("unique_push").pipelined(pipe, k, a)


def interpret(job: dict[str, Any], result: Any) -> str | None:
    if isinstance(result, Exception):
        raise result
    return job["jid"] if result else None


def release(job: dict[str, Any]) -> None:
    """Release this job's unique lock (owner-checked, deferred on an outage)."""
    key = lock_key(job)
    if key and job.get("unique"):
        locks.release(key, job["jid"], "Unique lock")


def holds_until_executed(job: dict[str, Any]) -> bool:
    return job.get("unique") == "until_executed" and lock_key(job) is not None


def is_last_attempt(job: dict[str, Any]) -> bool:
    """True when a failure of the run now starting would send the job to dead."""
    return payload.retries_exhausted({**job, "retry_count": int(job.get("retry_count") or 0) + 1})


class UniqueMiddleware:
    """Server side of unique jobs (see the module docstring)."""

    def __call__(self, job: dict[str, Any], queue: str, run: Any) -> Any:
        mode = job.get("unique")
        key = lock_key(job)
        if not mode or key is None:
            return run()
        if mode == "until_started":
            release(job)
            return run()
        if mode == "while_executing":
            return self._exclusive(job, key, run)
        try:
            result = run()
        except BaseException:
            if is_last_attempt(job):
                release(job)
            raise
        release(job)
        return result

    def _exclusive(self, job: dict[str, Any], key: str, run: Any) -> Any:
        from .middleware import Reschedule

        ttl = float(job.get("unique_for") or 86400)
        if not locks.take(key, job["jid"], ttl):
            raise Reschedule(
                WHILE_EXECUTING_RETRY_DELAY, "another run holds the while_executing lock"
            )
        try:
            return run()
        finally:
            release(job)
