"""Owner-checked locks and deferred releases (rule 8), shared by unique jobs and
``until_executed`` periodic entries.

A lock's value is its owner's jid; every expire, retake and delete checks it
atomically, so a stray older run can never shorten, extend or release a newer run's
lock. A release that fails while Redis is away is kept in the runtime's deferred
releases (``deferred()``, store/runtime.py) and retried on every heartbeat, before each
periodic tick and at shutdown, instead of leaving the lock to its TTL.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

import redis

from ..store import codec, connection, errors, runtime, scripts
from ..store.deferred import Deferred
from . import taskcontext

log = logging.getLogger("cogworker_django")


def _ttl(seconds: float) -> int:
    # Whole seconds: EXPIRE and SET EX reject fractions.
    return max(1, math.ceil(seconds))


def take(key: str, owner: str, ttl: float, conn: redis.Redis | None = None) -> bool:
    return bool(
        scripts.run("owned_take", conn or connection.get_client(), [key], [owner, _ttl(ttl)])
    )


def expire(key: str, owner: str, ttl: float, conn: redis.Redis | None = None) -> bool:
    return bool(
        scripts.run("owned_expire", conn or connection.get_client(), [key], [owner, _ttl(ttl)])
    )


def retake(key: str, owner: str, ttl: float, conn: redis.Redis | None = None) -> bool:
    return bool(
        scripts.run("owned_retake", conn or connection.get_client(), [key], [owner, _ttl(ttl)])
    )


def delete(key: str, owner: str, conn: redis.Redis | None = None) -> bool:
    return bool(scripts.run("owned_delete", conn or connection.get_client(), [key], [owner]))


# Per thread: set by a worker's processor while its run is abandoned to a requeued copy
# (the shutdown hand-over requeued it while it ran on). The copy has the same jid, so an
# owner check can't tell them apart: such a run releases nothing.
_run = threading.local()


def set_run_abandoned(abandoned: bool) -> None:
    _run.abandoned = abandoned


def run_abandoned() -> bool:
    abandoned = getattr(_run, "abandoned", None)
    if abandoned is None:  # a thread no processor runs on: an async run's (taskcontext.py)?
        run = taskcontext.current.get()
        return run is not None and run.abandoned
    return bool(abandoned)


def release(key: str, owner: str, component: str = "Lock release") -> bool:
    """Owner-checked delete that never raises; deferred when it fails (rule 4). Nothing
    is released from a run abandoned to its requeued copy (which holds it now)."""
    if run_abandoned():
        log.info("%s kept: its run was requeued at shutdown and the copy holds it", key)
        return False
    try:
        delete(key, owner)
    except Exception as exc:  # noqa: BLE001
        errors.report(component, exc, f"release of {key} deferred")
        deferred().add(key, owner)
        return False
    errors.recovered(component)
    return True


class DeferredReleases(Deferred[str, str]):
    """Releases that failed (lock key -> owner), retried until they go through. In this
    process's memory only: one still pending when the process exits falls back to the
    lock's TTL."""

    def __init__(self) -> None:
        super().__init__("release of")


def deferred() -> DeferredReleases:
    """This process's deferred releases (its runtime's: store/runtime.py)."""
    return runtime.current().of(DeferredReleases)


def retry_deferred(component: str = "Deferred lock releases") -> None:
    """Best-effort retry of the deferred releases, for beats, ticks and shutdown."""
    releases = deferred()
    if releases.pending():
        errors.best_effort(component, lambda: releases.retry_all(_delete_pending))


def _delete_pending(key: str, owner: str) -> None:
    delete(key, owner)


def hold_through_run(
    key: str,
    owner: str,
    run: Callable[[], Any],
    *,
    queued_ttl: float,
    last_attempt: bool,
    component: str,
) -> Any:
    """The run's side of a lock held from before the run until the job is done (an
    ``until_executed`` unique lock, an ``until_executed`` periodic entry's running lock):
    released when the run succeeds and when it fails for the last time; kept when it
    fails with a retry to come (the processor extends it over the backoff:
    :func:`extend_job_locks`); kept and extended over the delay when a middleware
    reschedules the job (``Reschedule``: not a failure, the job is still in the system)."""
    from .middleware import Reschedule

    try:
        result = run()
    except Reschedule as r:
        ttl = _seconds(r.delay, 0.0) + queued_ttl
        errors.best_effort(component, lambda: expire(key, owner, ttl), key)
        raise
    except BaseException:
        if last_attempt:
            release(key, owner, component)
        raise
    release(key, owner, component)
    return result


def job_locks(job: dict) -> list[str]:
    """Lock keys a job may hold while it is in the system: its unique lock
    (``until_executed`` from the push until done, ``until_started`` until it starts,
    ``while_executing`` left behind by a run whose worker died) and the running lock of an
    ``until_executed`` periodic entry. Every write to them is owner-checked, so naming a
    lock the job does not hold (any more) is harmless."""
    from ..store import homes, keys

    found = []
    digest = job.get("unique_digest")
    if (
        digest
        and isinstance(digest, str)
        and job.get("unique") in ("until_executed", "until_started", "while_executing")
    ):
        found.append(keys.unique(digest, homes.job_home(job)))
    entry = job.get("periodic")
    if entry and isinstance(entry, str) and job.get("periodic_until_executed"):
        found.append(keys.periodic_running(entry))
    return found


def release_job_locks(job: dict) -> None:
    """For a job leaving the system by a path no server middleware sees (dead as a poison
    or unregistered job, deleted or killed from the admin): release its locks."""
    jid = job.get("jid")
    if isinstance(jid, str):
        for key in job_locks(job):
            release(key, jid)


def extend_job_locks(job: dict, wait: float) -> None:
    """On a retried failure: keep the job's locks for the ``wait`` until the retry plus
    each lock's own lifetime while queued (the unique lock's ``unique_for``; the periodic
    running lock's queued TTL, ``UNIQUE_LOCK_TTL``)."""
    from .. import conf
    from ..store import homes, keys

    jid = job.get("jid")
    if not isinstance(jid, str):
        return
    queued_ttl = conf.get().UNIQUE_LOCK_TTL
    for key in job_locks(job):
        own: float = queued_ttl
        if key.startswith(keys.unique("", homes.job_home(job))):
            own = _seconds(job.get("unique_for"), queued_ttl)
        ttl = min(_seconds(wait, 0.0) + own, MAX_LOCK_TTL)
        errors.best_effort("Lock extension", functools.partial(expire, key, jid, ttl), key)


# Redis refuses an EXPIRE past what its millisecond clock can hold; a lock extended by a
# hostile backoff or payload is capped at ten years instead (still owner-checked).
MAX_LOCK_TTL = 10 * 365 * 86400


def _seconds(value: object, default: float) -> float:
    """``value`` as finite seconds > 0, else ``default`` (payloads and hooks may hold
    anything: a failure path must not raise on them)."""
    seconds = codec.number(value)
    return seconds if seconds is not None and seconds > 0 else default
