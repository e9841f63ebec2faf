"""Where a job being pushed or moved to its queue goes: :func:`destination`, the one
decision for every kind of push (the client's, single or in bulk: core/client.py writes
what it says), :func:`placement` for the pushes that take a lock their own way (the
unique script, a batch's push, the durable relay), :func:`to_queue` for the moves to a
queue (the poller, the admin's actions, a limiter's waker).

A batch member (``bid``) is not the client's to place: it is pushed and counted in one
step by the workflows package's pusher (workflows/store.py, lua/batch_push.lua), which
the client hands it to first. For every other job the kinds, in the order they are
decided:

- ``unique``: a unique job whose lock is taken with the push (core/unique.py,
  lua/unique_push.lua);
- ``schedule``: a job whose ``at`` is in the future: its queue's home's schedule (a
  zset scored by ``at``);
- ``zset``: a django.tasks priority: its queue's priority zset (core/priority.py);
- ``list``: everything else: its queue's list (LPUSH).

For the last three the destination carries the key, the value written and its score,
and whether the write lists the queue in ``P:queues`` beside it: always for a queue's
list or zset (a worker's poller and the admin find queues there), for a schedule only
when the schedule's home lists apart (store/homes.py: the poller finds a home's schedule
by its queue; in the prefix's own home the move to the queue lists it,
lua/requeue_due.lua).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..store import homes, keys
from . import payload, priority

# The unique modes whose lock is taken by the push itself (unique.push).
LOCKED_AT_PUSH = ("until_executed", "until_started")

KINDS = ("unique", "schedule", "zset", "list")


@dataclass(frozen=True, slots=True)
class Destination:
    kind: str  # one of KINDS
    queue: str
    key: str = ""  # "" for unique: its script decides the keys
    value: str = ""  # the payload text, or the priority zset's member
    score: float | None = None  # the zset score; None for the list (LPUSH)
    listed: bool = False  # the queue goes into P:queues with the write

    @property
    def score_arg(self) -> str:
        """The score as the scripts take it: "" for a list (LPUSH)."""
        return "" if self.score is None else repr(self.score)


def is_scheduled(job: dict[str, Any], now: float) -> bool:
    at = job.get("at")
    return at is not None and float(at) > now


def destination(job: dict[str, Any], now: float, encoded: str | None = None) -> Destination:
    """Where a push of ``job`` at ``now`` goes: a unique job locked at push is its
    script's to place; every other job waits where :func:`placement` says.
    ``encoded``: its payload text as built a moment ago by the same call (its
    ``enqueued_at`` is the build's), written as it is where the job is not re-stamped."""
    if job.get("unique") in LOCKED_AT_PUSH:
        return Destination("unique", job.get("queue", ""))
    return placement(job, now, encoded)


def placement(job: dict[str, Any], now: float, encoded: str | None = None) -> Destination:
    """Where ``job`` waits when it is pushed at ``now``, its lock aside (the unique
    script, a batch's and the durable relay's push place it with their own writes): the
    schedule of its queue's home while its ``at`` is ahead, else its queue
    (:func:`to_queue`)."""
    queue = job["queue"]
    if is_scheduled(job, now):
        home = homes.Home.of_queue(queue)
        data = encoded if encoded is not None else payload.encode(job)
        return Destination(
            "schedule", queue, home.schedule(), data, float(job["at"]), home.lists_apart()
        )
    return to_queue(job, now, encoded)


def to_queue(job: dict[str, Any], now: float, encoded: str | None = None) -> Destination:
    """Where ``job`` goes when it goes to its queue at ``now``, whatever its ``at`` (a
    due job the poller moves, the admin's "retry now" and "enqueue now", a job a limiter
    has room for): its queue's priority zset for a django.tasks priority, else its
    queue's list. ``enqueued_at`` is stamped ``now`` and the payload encoded here (rule
    3), unless ``encoded`` is given for a job that was not scheduled and has no priority
    (the text as built, enqueued_at included)."""
    queue = job["queue"]
    prioritised = priority.routes(job)
    if encoded is None or "at" in job or prioritised:
        job.pop("at", None)
        job["enqueued_at"] = now
        encoded = None
    if prioritised:
        value, score = priority.member(job, now)
        return Destination("zset", queue, keys.priority_queue(queue), value, score, True)
    data = encoded if encoded is not None else payload.encode(job)
    return Destination("list", queue, keys.queue(queue), data, None, True)
