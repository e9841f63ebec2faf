"""What happens to a job that failed: the retry backoff, and the payload filed in
``P:retry`` or ``P:dead``.

Backoff (seconds before retry number ``n``, n = 1, 2, ...)::

    n ** 4 + 15 + random(0, 10 * n)

about 16 s, 31 s, 96 s, 271 s, 640 s ... 4.5 days for the 25th: a default ``retry=True``
job keeps trying for about 25 days (table in docs/retries.md). ``COGWORKER["RETRY_BACKOFF"]`` names a function
``f(retry_count) -> seconds`` to use instead.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from django.utils.module_loading import import_string

from .. import conf
from ..core import jobs, middleware, payload, retry, tracebacks
from ..store import codec, errors, homes, keys
from ..store.codec import wire
from .ledger import Filing, Work

log = logging.getLogger("cogworker_django")

# Filing a failure must never raise: a failure path that raises kills the processor
# thread and leaves the job in the in-progress list, where it is requeued and run
# again, failing the same way forever. A RETRY_BACKOFF hook that raises or answers
# something that is not a finite number >= 0 is replaced by the built-in formula
# (logged once per hook and kind of problem, not once per job: errors.first_time).


def builtin_backoff(retry_count: int) -> float:
    return retry_count**4 + 15 + random.uniform(0, 10 * retry_count)


def backoff(retry_count: int) -> float:
    """Seconds before retry number ``retry_count``: the RETRY_BACKOFF hook's answer when
    it is a finite number >= 0, else the built-in formula. Never raises."""
    path = conf.get().RETRY_BACKOFF
    if path:
        try:
            seconds = _checked_seconds(import_string(path)(retry_count))
        except Exception as exc:  # noqa: BLE001 - a broken hook must not lose the failure
            _hook_failed(path, errors.describe(exc))
        else:
            if seconds is not None:
                return seconds
            _hook_failed(path, "it did not return a finite number of seconds >= 0")
    return builtin_backoff(retry_count)


def _checked_seconds(value: Any) -> float | None:
    seconds = codec.number(value)
    return seconds if seconds is not None and seconds >= 0 else None


def _hook_failed(path: str, problem: str) -> None:
    if not errors.first_time("RETRY_BACKOFF", path, problem.split(":", 1)[0]):
        return
    log.error(
        "RETRY_BACKOFF %s failed (%s): the built-in backoff is used instead (logged once)",
        path,
        problem,
    )


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
    ("dead", now). The job's retry control (core/retry.py) decides with the count: an
    error ``retry_on`` does not name goes to dead at once, ``Retry(in_=)`` and
    ``retry_in`` set the wait."""
    try:
        job["retry_count"] = int(job.get("retry_count") or 0) + 1
    except (TypeError, ValueError):
        job["retry_count"] = 1
    if exc is not None:
        record_error(
            job,
            payload.error_class(exc),
            payload.error_message(exc),
            tracebacks.traceback_text(exc),
        )
    fn = jobs.registered(str(job.get("func")))
    opts = fn.options if fn is not None else {}
    if (
        payload.retries_exhausted(job)
        # Arguments the function can't take, or a model row gone, fail the same way
        # every time: not retried.
        or isinstance(exc, (jobs.BadArguments, jobs.ArgumentGone))
        or not retry.retried(opts, exc)
    ):
        return "dead", time.time()
    wait = retry.delay(opts, job["retry_count"], exc, backoff, str(job.get("func")))
    return "retry", time.time() + wait


def to_dead(job: dict[str, Any], error_class: str, message: str) -> tuple[str, float]:
    """File ``job`` straight in dead with this error (unregistered, poison, unparseable)."""
    record_error(job, error_class, message)
    return "dead", time.time()


def reschedule_delay(r: middleware.Reschedule) -> float:
    """A middleware's Reschedule delay, or UNIQUE_RESCHEDULE_DELAY when it is not a finite
    number >= 0 (a NaN score can't be filed; an infinite one would never come due)."""
    delay = _checked_seconds(r.delay)
    if delay is not None:
        return delay
    log.error("Reschedule(delay=%r) is not a usable delay: rescheduled with the default", r.delay)
    return conf.get().UNIQUE_RESCHEDULE_DELAY


def filing_for(work: Work, job: dict[str, Any], target: str, score: float) -> Filing:
    """The filing of a failed job (with its ``on_dead`` job, for dead); never raises. A
    job a middleware left holding values JSON can't take is filed in dead with its
    payload as it was fetched."""
    try:
        return Filing(
            target, score, payload.encode(job), on_dead_of(job) if target == "dead" else None
        )
    except Exception as exc:  # noqa: BLE001 - the failure path never kills the thread
        log.error(
            "%s (jid %s) can't be encoded after its run (%s): filed in dead as fetched",
            job.get("func"),
            job.get("jid"),
            errors.describe(exc),
        )
        wrapper = payload.unparseable(
            wire(work.raw), work.queue, "UnencodableAfterRun", errors.describe(exc)
        )
        if isinstance(job.get("jid"), str):
            wrapper["jid"] = job["jid"]
        return Filing("dead", time.time(), payload.encode(wrapper))


def on_dead_of(job: dict[str, Any]) -> tuple[str, str, str] | None:
    """The job ``job``'s ``on_dead`` option names, with ``dead_jid``, as a filing carries
    it (payload, score, queue); None for none. Never raises: a callback that can't be
    built is logged, and the job is filed in dead without it."""
    fn = jobs.registered(str(job.get("func")))
    sig = fn.options.get("on_dead") if fn is not None else None
    if sig is None:
        return None
    try:
        built = sig.build(**{})
        built["kwargs"][retry.DEAD_JID] = job.get("jid")
        return payload.encode(built), "", built["queue"]
    except Exception as exc:  # noqa: BLE001 - the failure path never kills the thread
        log.error(
            "%s (jid %s): its on_dead job could not be built (%s): filed in dead without it",
            job.get("func"),
            job.get("jid"),
            errors.describe(exc),
        )
        return None


def on_dead_placement(on_dead: tuple[str, str, str], home: str) -> tuple[list[str], list[Any]]:
    """The keys and ARGV settle.lua places an on_dead job with, filed in ``home``: onto
    its queue's list (with P:queues when this home lists its queues) when that queue is
    in this home; else into this home's schedule, due now (a queue in another hash slot:
    the poller moves it there)."""
    value, score, queue = on_dead
    if not score and keys.home_of(queue) == home:
        return [keys.queue(queue), *homes.Home(home).listing_keys()], [1, value, "", queue]
    return [keys.schedule(home)], [1, value, score or repr(time.time()), queue]
