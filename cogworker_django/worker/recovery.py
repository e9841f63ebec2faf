"""Orphan recovery: the jobs of processes that died are run again by the living.

A process is dead when its last beat (``P:last_beat``, Redis clock) is older than
``ORPHAN_THRESHOLD`` and its presence key is gone. Each of its jobs is moved back to its
queue with ``orphan_count`` + 1 by one script per job that removes it from the dead
process's list and pushes it only if it was still there, so two recoverers never
requeue it twice. Past ``MAX_ORPHANINGS`` the job goes to dead instead (a job that kills
its worker must not kill the fleet forever). Then the identity is forgotten.

Rule 13: nobody is an orphan because Redis was away. A process recovers others only
once its own beats have succeeded for a few intervals after an outage, so the others
have had their chance to beat too.

Also here: filing ``P:unsettled`` (jobs a stopping process ran but could not file).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import Any

import redis

from .. import conf, departures, errors, keys, payload, scripts
from . import failures
from .fetch import text, wire
from .processor import file_job
from .record import Filing

log = logging.getLogger("cogworker_django")

# Beats a process must have had since its last outage before it declares others dead.
HEALTHY_BEATS_BEFORE_RECOVERY = 2
UNSETTLED_BATCH = 100


def requeue_from_list(
    conn: Any, identity: str, raws: Iterable[str], *, count_orphaning: bool, fallback_queue: str
) -> int:
    """Move each of ``raws`` from ``identity``'s in-progress list to its queue (or to dead
    past MAX_ORPHANINGS); returns how many this call moved."""
    source = keys.inprogress(identity)
    max_orphanings = conf.get().MAX_ORPHANINGS
    moved = 0
    for raw in raws:
        job = payload.decode(wire(raw))
        queue = (
            job.get("queue")
            if isinstance(job.get("queue"), str) and job.get("queue")
            else fallback_queue
        )
        to_dead = job["func"] == payload.UNPARSEABLE
        if count_orphaning and not to_dead:
            try:
                job["orphan_count"] = int(job.get("orphan_count") or 0) + 1
            except (TypeError, ValueError):
                job["orphan_count"] = 1
            if job["orphan_count"] > max_orphanings:
                failures.to_dead(
                    job,
                    "OrphanedTooOften",
                    f"recovered from dead workers {job['orphan_count'] - 1} times; the "
                    f"job may be killing its worker (MAX_ORPHANINGS = {max_orphanings})",
                )
                to_dead = True
        if to_dead:
            target, score = keys.dead(), repr(time.time())
        else:
            job["enqueued_at"] = time.time()
            target, score = keys.queue(queue), ""
        new = payload.encode(job)
        if scripts.run(
            "recover_job", conn, [source, target, keys.queues()], [wire(raw), new, queue, score]
        ):
            moved += 1
            if to_dead:
                log.error(
                    "%s (jid %s) filed in dead: %s",
                    job["func"],
                    job["jid"],
                    job.get("error_message"),
                )
                departures.job_left(job, job.get("error_message") or "recovered too often")
    return moved


def redis_now(conn: Any) -> int:
    """Redis's clock (last beats are stamped with it); this host's clock where ``TIME``
    is refused (some proxies and managed services), as the heartbeat does."""
    try:
        return int(conn.time()[0])
    except redis.ResponseError:
        return int(time.time())


class OrphanRecovery:
    def __init__(self, identity: str, heartbeat: Any, fallback_queue: str) -> None:
        self.identity = identity
        self.heartbeat = heartbeat
        self.fallback_queue = fallback_queue
        self.completed_once = False

    def ready(self) -> bool:
        since = self.heartbeat.healthy_since
        wait = HEALTHY_BEATS_BEFORE_RECOVERY * conf.get().HEARTBEAT_INTERVAL
        return since is not None and time.monotonic() - since >= wait

    def run(self, conn: Any) -> int | None:
        """One pass; returns how many jobs it moved, or None when it did not look yet:
        this process's own beats have not been healthy for long enough (rule 13). That
        holds at boot too: a process starting just after an outage can't tell the
        others' stale beats from death until they have had their chance to beat."""
        if not self.ready():
            return None
        threshold = conf.get().ORPHAN_THRESHOLD
        now = redis_now(conn)
        ids = [text(i) for i in conn.smembers(keys.inprogress_ids())]
        beats = {text(k): v for k, v in conn.hgetall(keys.last_beat()).items()}
        moved = 0
        for ident in ids:
            if ident == self.identity:
                continue
            try:
                moved += self._recover(conn, ident, beats.get(ident), now, threshold)
            except Exception as exc:  # noqa: BLE001 - one identity never stops the others
                if errors.is_unavailable(exc):
                    raise
                log.error("orphan recovery of %s failed: %s", ident, errors.describe(exc))
        self.completed_once = True
        return moved

    def _recover(self, conn: Any, ident: str, beat: Any, now: int, threshold: float) -> int:
        try:
            last = float(beat) if beat is not None else None
        except (TypeError, ValueError):
            last = None
        if last is not None and now - last < threshold:
            return 0
        if conn.exists(keys.process(ident)):
            return 0  # alive (its stamp may be failing while its presence works)
        raws = [text(r) for r in conn.lrange(keys.inprogress(ident), 0, -1)]
        moved = requeue_from_list(
            conn,
            ident,
            dict.fromkeys(raws),
            count_orphaning=True,
            fallback_queue=self.fallback_queue,
        )
        if moved:
            log.warning("recovered %d job(s) from dead process %s", moved, ident)
        if conn.llen(keys.inprogress(ident)) == 0:
            # Forget the dead identity everywhere (its presence key is already gone).
            pipe = conn.pipeline(transaction=False)
            pipe.srem(keys.inprogress_ids(), ident)
            pipe.hdel(keys.last_beat(), ident)
            pipe.srem(keys.processes(), ident)
            pipe.delete(keys.work(ident))
            pipe.execute(raise_on_error=False)
        return moved


def file_unsettled(conn: Any) -> int:
    """File jobs that stopping processes ran but could not file; never run them again."""
    filed = 0
    for entry in conn.lrange(keys.unsettled(), 0, UNSETTLED_BATCH - 1):
        entry = text(entry)
        try:
            data = json.loads(wire(entry))
            filing = Filing(data["target"], float(data["score"]), data["payload"])
            if filing.target not in ("retry", "dead", "schedule"):
                raise ValueError(f"unknown target {filing.target!r}")
        except (ValueError, KeyError, TypeError) as exc:
            # An entry we can't read is still a job: bury it in dead with its bytes.
            wrapper = payload.unparseable(
                wire(entry), None, "InvalidUnsettledEntry", errors.safe_str(exc)
            )
            filing = Filing("dead", time.time(), payload.encode(wrapper))
            entry_ok = False
        else:
            entry_ok = True
        target = {"retry": keys.retry(), "dead": keys.dead(), "schedule": keys.schedule()}[
            filing.target
        ]
        if scripts.run(
            "file_unsettled",
            conn,
            [keys.unsettled(), target],
            [wire(entry), repr(filing.score), filing.payload],
        ):
            filed += 1
            if not entry_ok:
                log.error("unreadable entry of %s filed in dead", keys.unsettled())
    return filed


__all__ = ["OrphanRecovery", "file_job", "file_unsettled", "requeue_from_list"]
