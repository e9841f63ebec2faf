"""``find_job``: where one job id is now, everywhere an operator would look: each known
queue, the schedule, retries, dead, the in-progress lists of the processes (running, or
waiting for recovery) and the run history.

Every place is searched with the bounds of its own find (a queue's first
``queues.FIND_LIMIT`` jobs, about ``search.FIND_BUDGET`` ZSCAN calls a set, the whole
retained history in slices filtered in Redis), so a lookup costs a few round trips per
queue and set, never a whole read of a big one into Python.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import redis

from ..store import errors, homes, keys
from ._util import as_bytes, client, text
from .history import History, Run
from .jobs import DeadSet, RetrySet, ScheduledSet
from .queues import Queue
from .records import JobRecord

# Longest jid accepted (ours are 24 hex digits; django.tasks ids are UUIDs).
MAX_JID_LENGTH = 100
# Runs of one jid listed (each attempt is a run).
RUNS_SHOWN = 25


@dataclass(frozen=True)
class Found:
    """One place the job is: ``where`` is "queue", "schedule", "retry", "dead",
    "inprogress" or "history"; ``record`` is the payload there (None for a history
    run, which is ``run``); ``queue`` names the queue, ``identity`` the process whose
    in-progress list holds it (``alive``: False when that process is gone and the job
    awaits recovery)."""

    where: str
    record: JobRecord | None = None
    run: Run | None = None
    queue: str = ""
    identity: str = ""
    alive: bool = True


def clean_jid(jid: object) -> str:
    """``jid`` stripped; ValueError when it can't be a job id."""
    if not isinstance(jid, str) or not jid.strip():
        raise ValueError("a job id is needed: the 24 hex digits shown as Jid")
    jid = jid.strip()
    if len(jid) > MAX_JID_LENGTH or any(c.isspace() or c in '"\\\\' for c in jid):
        raise ValueError(
            f"{jid[:MAX_JID_LENGTH]!r} is not a job id: no spaces or quotes, at most "
            f"{MAX_JID_LENGTH} characters"
        )
    return jid


def find_job(jid: str, runs: int = RUNS_SHOWN) -> list[Found]:
    """Everywhere ``jid`` is now, in the order a job moves: queues, schedule, in
    progress, retries, dead, then its past runs (newest first)."""
    jid = clean_jid(jid)
    found: list[Found] = []
    for name in Queue.names():
        record = _skipping_wrong_type(functools.partial(Queue(name).find, jid))
        if record is not None:
            found.append(Found("queue", record, queue=name))
    record = _skipping_wrong_type(functools.partial(ScheduledSet().find, jid))
    if record is not None:
        found.append(Found("schedule", record, queue=record.queue))
    found.extend(_in_progress(jid))
    for where, job_set in (("retry", RetrySet()), ("dead", DeadSet())):
        record = _skipping_wrong_type(functools.partial(job_set.find, jid))
        if record is not None:
            found.append(Found(where, record, queue=record.queue))
    for run in History().runs_of(jid, runs):
        found.append(Found("history", run=run, queue=run.queue))
    return found


# What each place says of a job that has not ended (JobRef.status()), in the order a job
# moves; a history run names how an ended job ended, once its kept result is gone.
_STATUS_OF_PLACE = {
    "queue": "queued",
    "schedule": "scheduled",
    "inprogress": "running",
    "retry": "retrying",
    "dead": "dead",
}
_STATUS_OF_RUN = {
    "success": "succeeded",
    "discarded": "discarded",
    "cancelled": "cancelled",
    "expired": "expired",
}


def status_of(jid: str) -> str | None:
    """Where ``jid`` is, as ``JobRef.status()`` says it (core/results.py): queued,
    scheduled, running, retrying, dead; a job in the list of a process gone (awaiting
    recovery) is queued; else the last run the history keeps, else None."""
    try:
        found = find_job(jid, runs=1)
    except ValueError:
        return None
    for place in found:
        if place.where == "inprogress" and not place.alive:
            return "queued"
        if place.where in _STATUS_OF_PLACE:
            return _STATUS_OF_PLACE[place.where]
    for place in found:
        if place.run is not None:
            return _STATUS_OF_RUN.get(place.run.status)
    return None


def _skipping_wrong_type(find: Callable[[], JobRecord | None]) -> JobRecord | None:
    # A key of the wrong type holds no job (the key guard moves it aside): look elsewhere.
    try:
        return find()
    except redis.ResponseError as exc:
        if "WRONGTYPE" in errors.safe_str(exc):
            return None
        raise


def _in_progress(jid: str) -> list[Found]:
    conn = client()
    idents = sorted(text(m) for m in conn.smembers(keys.inprogress_ids()))
    if not idents:
        return []
    lists = homes.inprogress_keys(conn, idents)
    pipe = conn.pipeline(transaction=False)
    for ident in idents:
        pipe.exists(keys.process(ident))
        for key in lists[ident]:
            pipe.lrange(key, 0, -1)  # small: what one process has taken
    replies = iter(pipe.execute(raise_on_error=False))
    needle = f'"jid":"{jid}"'.encode()
    out = []
    for ident in idents:
        alive = next(replies)
        taken = [next(replies) for _ in lists[ident]]
        rows = [raw for part in taken if isinstance(part, list) for raw in part]
        for raw in rows:
            if needle in as_bytes(raw):
                record = JobRecord.from_raw(raw, None, "inprogress")
                if record.jid == jid:
                    out.append(
                        Found(
                            "inprogress",
                            record,
                            queue=record.queue,
                            identity=ident,
                            alive=alive != 0,
                        )
                    )
    return out
