"""``JobRef``: what an enqueue returns. Still the job id (a ``str``: code that stored or
compared jids goes on working), with the questions a caller asks of its job: where it
is, how far it has come, what it returned (core/results.py).

Celery's ``AsyncResult`` names answer too (``id``, ``get``, ``ready``, ``successful``,
``state`` in Celery's state names), so code written against Celery reads the same.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import results

# Celery's name of each status (celery.states).
CELERY_STATES = {
    None: "PENDING",
    "queued": "PENDING",
    "scheduled": "PENDING",
    "running": "STARTED",
    "retrying": "RETRY",
    "succeeded": "SUCCESS",
    "dead": "FAILURE",
    "cancelled": "REVOKED",
    "expired": "REVOKED",
    "discarded": "IGNORED",
}


class JobRef(str):
    """A job's reference: its jid, with :meth:`status`, :meth:`progress`,
    :meth:`result` and :meth:`aresult`. ``JobRef(jid)`` rebuilds one from a jid stored
    anywhere (a row, a session, another process)."""

    __slots__ = ()

    @property
    def id(self) -> str:
        """The job id (Celery's name)."""
        return str(self)

    @property
    def jid(self) -> str:
        return str(self)

    def status(self) -> str | None:
        """``"queued"``, ``"scheduled"``, ``"running"``, ``"retrying"``, ``"succeeded"``,
        ``"dead"``, ``"cancelled"``, ``"expired"``, ``"discarded"``, or None (unknown:
        never enqueued, or its result's time is over). An ended job is read from its kept
        result (one round trip); a job not ended yet is looked for in the queues, the
        schedule, the retries and the running jobs (a few round trips)."""
        fields = results.read(self)
        status = results.status_of(fields)
        if status in results.ENDED:
            return status
        found = results.locate(self)
        return found or status

    def progress(self) -> dict[str, Any] | None:
        """The last progress the job reported (``{"done", "total", "message", "at"}``),
        or None."""
        return results.progress_of(results.read(self))

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job to end and return what it returned. Raises
        :class:`~cogworker_django.JobFailed` when it ended otherwise (dead, cancelled,
        expired, discarded) or its value could not be kept, and ``TimeoutError`` when it
        has not ended within ``timeout`` seconds (None: no limit). Needs a
        ``result_ttl`` above 0 (the default keeps results ten minutes)."""
        fields = results.read(self)
        if not results.has_ended(fields):
            found = results.wait_ended(self, timeout)
            if found is None:
                raise TimeoutError(f"job {self} has not ended within {timeout} s")
            fields = found
        return results.outcome(self, fields)

    async def aresult(self, timeout: float | None = None) -> Any:
        """:meth:`result` for async code: the wait runs on a thread, the loop goes on."""
        return await asyncio.to_thread(self.result, timeout)

    # Celery's AsyncResult names ------------------------------------------------------------

    def get(self, timeout: float | None = None, propagate: bool = True) -> Any:
        """Celery's name of :meth:`result`. ``propagate=False`` returns the
        :class:`~cogworker_django.JobFailed` instead of raising it."""
        try:
            return self.result(timeout)
        except results.JobFailed as exc:
            if propagate:
                raise
            return exc

    def ready(self) -> bool:
        """True once the job has ended (whatever the outcome)."""
        return results.has_ended(results.read(self))

    def successful(self) -> bool:
        return results.status_of(results.read(self)) == "succeeded"

    def failed(self) -> bool:
        return results.status_of(results.read(self)) in ("dead", "cancelled", "expired")

    @property
    def state(self) -> str:
        """The status in Celery's words: PENDING, STARTED, RETRY, SUCCESS, FAILURE,
        REVOKED (cancelled or expired), IGNORED (discarded)."""
        return CELERY_STATES.get(self.status(), "PENDING")

    def __repr__(self) -> str:
        return f"<JobRef {str(self)!r}>"


def ref(jid: str | None) -> JobRef | None:
    return None if jid is None else JobRef(jid)
