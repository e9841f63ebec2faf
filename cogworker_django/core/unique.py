"""Unique jobs: digests and their owner-checked locks (``P:unique:<digest>``, value = jid).

``until_executed``: lock taken with the push (one script), held until success or the
terminal failure, extended on a retried failure, released whenever the job leaves by
another path (locks.release_job_locks). ``until_started``: lock taken with the push,
released when a processor takes the job. ``while_executing``: lock taken when the run
starts; a run that finds it held is rescheduled ``UNIQUE_RESCHEDULE_DELAY`` seconds
later instead of running alongside. Every release is owner-checked and deferred while
Redis is away (rule 8, locks.py). docs/unique.md tells the whole story.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any

from .. import conf
from ..store import bell, connection, errors, homes, keys, scripts
from . import locks, payload, route
from .middleware import Reschedule

# Modes whose lock is taken by the push script (the others take none at push).
PUSH_LOCKED = route.LOCKED_AT_PUSH


def digest(func: str, args: Any, kwargs: Any, queue: str) -> str:
    """SHA-256 of canonical JSON of (callable, args, kwargs, queue): stable over key order
    and whitespace, and computed on the arguments as the payload will hold them (a tuple
    is a list, a dict key ``1`` is ``"1"``, a UUID its tagged form), so what decodes alike
    digests alike."""
    try:
        # Through JSON first: mixed int/str dict keys could not be sorted otherwise.
        plain = json.loads(json.dumps([func, list(args), dict(kwargs), queue]))
    except (TypeError, ValueError):
        # payload.build raises naming the argument that can't travel; one that can (a
        # UUID, a model instance...) is digested in its tagged form, as the payload
        # holds it: the same row or UUID digests alike.
        job = payload.build(func, args, kwargs, queue=queue)
        plain = [func, job["args"], job["kwargs"], queue]
    canonical = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def lock_key(job: dict[str, Any]) -> str | None:
    d = job.get("unique_digest")
    # In the job's queue's home: unique_push.lua takes it with the push, in one slot.
    return keys.unique(d, homes.job_home(job)) if isinstance(d, str) and d else None


def lock_ttl(job: dict[str, Any]) -> float:
    """The job's ``unique_for``, or ``UNIQUE_LOCK_TTL`` when the payload has none, or
    one no enqueue accepts (a payload or outbox row written by hand: 1e300 s, inf, nan,
    a negative; conf's range for unique_for): Redis would refuse such an expiry, and the
    job would go without its lock."""
    value = job.get("unique_for")
    if value is None or conf.number_problem("unique_for", value):
        return float(conf.get().UNIQUE_LOCK_TTL)
    return float(value)


def reschedule_delay() -> float:
    return conf.get().UNIQUE_RESCHEDULE_DELAY


def _push_ttl(job: dict[str, Any], now: float) -> int:
    ttl = lock_ttl(job)
    at = job.get("at")
    if at is not None:
        ttl += max(0.0, float(at) - now)  # a scheduled job locks from the push
    return max(1, math.ceil(ttl))


def _script_args(job: dict[str, Any]) -> tuple[list[str], list[Any]]:
    lock = lock_key(job)
    if lock is None:  # only a payload built by hand: jobs._build always sets the digest
        raise ValueError(
            f"job {job.get('jid')!r}: unique={job.get('unique')!r} without a unique_digest"
        )
    now = time.time()
    where = route.placement(job, now)  # the schedule, the list or a priority's zset
    target, data, score = where.key, where.value, where.score_arg
    # P:queues is in the prefix's home: with a home per queue the push can't list the
    # queue (client.py lists it once per bulk call instead).
    listing = homes.Home.of_job(job).listing_keys()
    return (
        [lock, target, *listing],
        [job["jid"], _push_ttl(job, now), data, score, job["queue"]],
    )


def push(job: dict[str, Any], claimed: Any = None) -> str | None:
    """Push a job whose lock is taken with the push; None when it is a duplicate.
    ``claimed``: a claimed periodic slot's final write (client.FinalWrite): its claim
    record is checked and removed in the same script."""
    k, a = _script_args(job)
    if claimed is not None:
        key, field, jid = claimed.claim()
        k.append(key)
        a += [field, jid]
    conn = connection.get_client()
    pushed = int(scripts.run("unique_push", conn, k, a))
    if pushed == PUSHED_ONTO_EMPTY:  # an idle worker starts it at once
        bell.ring(conn, (job["queue"],))
        pushed = 1
    if claimed is not None:
        claimed.unique_result(pushed)
    return job["jid"] if pushed == 1 else None


# lua/unique_push.lua's reply for a job pushed onto a queue list that was empty.
PUSHED_ONTO_EMPTY = 2


def queue_push(pipe: Any, job: dict[str, Any]) -> None:
    """Queue :func:`push` on a bulk pipeline (see client.push_many)."""
    k, a = _script_args(job)
    scripts.get("unique_push").pipelined(pipe, k, a)


def interpret(job: dict[str, Any], result: Any) -> str | None:
    """The jid of a job pushed by :func:`queue_push`, None for a duplicate."""
    if isinstance(result, Exception):
        raise result
    return job["jid"] if result else None


def release(job: dict[str, Any]) -> None:
    """Release this job's unique lock (owner-checked, deferred on an outage; never raises)."""
    key = lock_key(job)
    if key and job.get("unique"):
        locks.release(key, job["jid"], "Unique lock")


def is_last_attempt(job: dict[str, Any]) -> bool:
    """True when a failure of the run now starting would send the job to dead."""
    return payload.retries_exhausted({**job, "retry_count": int(job.get("retry_count") or 0) + 1})


class UniqueMiddleware:
    """Server side of unique jobs (see the module docstring). Built in, outermost."""

    payload_fields = ("unique",)  # a run without one passes through (RunChain skips it)

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
        if mode != "until_executed":
            return run()  # an unknown mode (a hand-made payload) holds nothing
        return locks.hold_through_run(
            key,
            job["jid"],
            run,
            queued_ttl=lock_ttl(job),
            last_attempt=is_last_attempt(job),
            component="Unique lock",
        )

    def _exclusive(self, job: dict[str, Any], key: str, run: Any) -> Any:
        try:
            taken = locks.take(key, job["jid"], lock_ttl(job))
        except Exception as exc:
            if not errors.is_unavailable(exc):
                raise
            # Redis away: try again later rather than count a failure (a retry=False job
            # would go straight to dead over an outage).
            raise Reschedule(
                reschedule_delay(), "Redis unavailable at the while_executing lock"
            ) from exc
        if not taken:
            raise Reschedule(reschedule_delay(), "another run holds the while_executing lock")
        try:
            return run()
        finally:
            release(job)
