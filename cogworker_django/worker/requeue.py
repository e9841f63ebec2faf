"""Putting jobs back from an in-progress list: orphan recovery (a dead process's list)
and the reconcile of a live one (jobs it took without knowing it).

Each job moves by one script (lua/recover_job.lua) that removes it from the list and
pushes it only if it was still there, so two recoverers never requeue it twice. Orphan
recovery counts the job's orphanings; past ``MAX_ORPHANINGS`` it goes to dead instead (a
job that kills its worker must not kill the fleet forever).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from .. import conf
from ..core import departures, payload, priority
from ..store import homes, keys, scripts
from ..store.codec import wire
from . import failures

log = logging.getLogger("cogworker_django")


def requeue_from_list(
    conn: Any,
    identity: str,
    raws: Iterable[str],
    *,
    home: str,
    count_orphaning: bool,
    fallback_queue: str,
) -> int:
    """Move each of ``raws`` from ``identity``'s in-progress list in ``home`` to its queue
    (or to dead past MAX_ORPHANINGS); returns how many this call moved. A job whose
    payload names no queue, or a queue of another home, goes to ``fallback_queue`` (a
    queue of ``home``: one script moves it, in one slot)."""
    source = keys.inprogress(identity, home)
    listing = homes.Home(home).listing_keys()  # lua/recover_job.lua: one slot
    max_orphanings = conf.get().MAX_ORPHANINGS
    moved = 0
    for raw in raws:
        job = payload.decode(wire(raw))
        queue = homes.home_queue(job.get("queue"), home, fallback_queue)
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
            target, score = keys.dead(home), repr(time.time())
        else:
            job["enqueued_at"] = time.time()
            target, score = priority.return_key(queue), ""
        new = payload.encode(job)
        script_keys, args = [source, target, *listing], [wire(raw), new, queue, score]
        on_dead = failures.on_dead_of(job) if to_dead else None
        if on_dead is not None:  # pushed with the filing, as a run's death pushes it
            more_keys, more_args = failures.on_dead_placement(on_dead, home)
            args += [len(script_keys) + 1, *more_args]
            script_keys += more_keys
        if scripts.run("recover_job", conn, script_keys, args):
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
