"""The running lock of ``until_executed`` periodic entries: ``P:periodic:running:<name>``,
value = the jid of the run holding it. While it is held, the entry's slots are skipped,
so runs never overlap.

Lifecycle (every write owner-checked, rule 8, so a stray older run can never shorten,
extend or release a newer run's lock):
- taken by the claim script with the slot, before the job exists, for the short claim
  TTL (:func:`claim_ttl`); once the job is pushed, confirmed with the queued TTL
  (``UNIQUE_LOCK_TTL``, whole seconds: it goes into ``EXPIRE``) unless its run has
  already started. A process that dies between claim and push, or a push a Redis
  restart lost, so blocks the entry for the claim TTL, never for a day;
- shortened to the active TTL (``PERIODIC_ACTIVE_TTL``) when the run starts
  (:class:`RunningLockMiddleware`), or re-taken if it lapsed meanwhile (a run recovered
  from a dead worker); a run that finds another run holding it waits (rescheduled)
  rather than overlap it;
- refreshed by its process's heartbeat while the job is inside ``perform``, and only
  then (:class:`LockRefresher`), so a run whose process dies frees the entry within
  the active TTL; re-taken, not just extended, on the first beat after a failed one
  (Redis may have been away longer than the TTL); a refresh and the end of the run's
  ``perform`` are ordered (``Ledger.while_performing``), so a refresh never lands after
  the extension below and cuts it back;
- extended on a retried failure to cover the backoff (processor, through
  ``locks.extend_job_locks``); released on success, on the terminal failure, and when
  the job reaches dead by another path (``locks.release_job_locks``). A release that
  fails is deferred (``locks.deferred``): retried on every beat, before each tick and
  at shutdown.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from .. import conf
from ..core import locks, payload
from ..core.middleware import Reschedule, ServerMiddleware
from ..core.unique import is_last_attempt
from ..store import errors, keys, scripts

log = logging.getLogger("cogworker_django")

COMPONENT = "Periodic lock"


def queued_ttl() -> int:
    """TTL while the run waits in its queue: ``UNIQUE_LOCK_TTL``, whole seconds."""
    return max(1, math.ceil(conf.get().UNIQUE_LOCK_TTL))


def active_ttl() -> int:
    """TTL while the run runs, refreshed every beat: ``PERIODIC_ACTIVE_TTL``."""
    return max(1, math.ceil(conf.get().PERIODIC_ACTIVE_TTL))


# The claim's TTL exceeds the active TTL by this much, so that a lock a run's start has
# shortened is told apart from one only claimed (lua/owned_confirm.lua).
CLAIM_MARGIN = 30


def claim_ttl() -> int:
    """TTL of the lock the claim takes, until the job is pushed and the lock confirmed
    with the queued TTL: a process that dies between claim and push (or a push Redis
    lost in a restart) leaves the entry blocked for this long, not ``UNIQUE_LOCK_TTL``."""
    return active_ttl() + CLAIM_MARGIN


def confirm(conn: Any, key: str, jid: str) -> bool:
    """After the push: the claimed lock gets the queued TTL (lua/owned_confirm.lua)."""
    return bool(scripts.run("owned_confirm", conn, [key], [jid, queued_ttl(), active_ttl() * 1000]))


def held_lock(job: dict[str, Any]) -> tuple[str, str] | None:
    """(lock key, owner jid) when ``job`` is a run of an ``until_executed`` entry."""
    name, jid = job.get("periodic"), job.get("jid")
    if job.get("periodic_until_executed") is True and isinstance(name, str) and name:
        if isinstance(jid, str) and jid:
            return keys.periodic_running(name), jid
    return None


class RunningLockMiddleware(ServerMiddleware):
    """Built-in server middleware: the run's side of the lifecycle above. A no-op for
    any job that is not a run of an ``until_executed`` entry."""

    payload_fields = ("periodic_until_executed",)  # (RunChain skips it for any other)

    def __call__(self, job: dict[str, Any], queue: str, run: Any) -> Any:
        held = held_lock(job)
        if held is None:
            return run()
        key, jid = held
        if not self._start(key, jid):
            delay = conf.get().UNIQUE_RESCHEDULE_DELAY
            raise Reschedule(delay, f"another run of {job['periodic']} holds {key}")
        return locks.hold_through_run(
            key,
            jid,
            run,
            queued_ttl=queued_ttl(),
            last_attempt=is_last_attempt(job),
            component=COMPONENT,
        )

    @staticmethod
    def _start(key: str, jid: str) -> bool:
        """Shorten the lock to the active TTL, taking it back if it lapsed; False when
        another run holds it. Best-effort: if Redis can't say, the run goes ahead and
        the lock keeps its queued TTL until this process's next beat shortens it."""
        try:
            return locks.retake(key, jid, active_ttl())
        except Exception as exc:  # noqa: BLE001 - never fails the run (rule 4)
            errors.report(COMPONENT, exc, f"{key} not shortened at start")
            return True


# The marker every run of an until_executed entry carries in its raw payload: payloads
# without it are not decoded on every beat.
_MARKER = "periodic_until_executed"


class LockRefresher:
    """On every heartbeat (the worker's Periodic plugin): keep the locks of this
    process's performing runs alive. ``ledger`` is the worker's (worker/ledger.Ledger)."""

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        # A beat whose refresh hit an outage: the next one re-takes, as after a failed beat.
        self._retake_next = False

    def __call__(self, conn: Any, recovering: bool) -> None:
        retake = recovering or self._retake_next
        self._retake_next = False
        ttl = active_ttl()
        ledger = self.ledger
        for raw in ledger.performing():
            if _MARKER not in raw:
                continue
            held = held_lock(payload.decode(raw))
            if held is None:
                continue
            with ledger.while_performing(raw) as still:
                if still:
                    self._refresh(held, ttl, retake, conn)

    def _refresh(self, held: tuple[str, str], ttl: float, retake: bool, conn: Any) -> None:
        key, jid = held
        try:
            if retake:
                locks.retake(key, jid, ttl, conn)
            else:
                # Only extends a lock still ours: a missing one was released (the run
                # is past perform) and must stay released.
                locks.expire(key, jid, ttl, conn)
        except Exception as exc:
            if errors.is_unavailable(exc):
                self._retake_next = True
                raise
            # Per lock: one bad key never leaves the others to expire (rule 6).
            log.error("periodic lock %s not refreshed: %s", key, errors.describe(exc))
