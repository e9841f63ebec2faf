"""Putting jobs back from an in-progress list: orphan recovery (a dead process's list),
the reconcile of a live one (jobs it took without knowing it), and the counting of the
jobs a stopping process hands back mid-run (:class:`HandedBack`, used by fetch.py's
hand-over).

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
from ..store.codec import raw_text, wire
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
        if count_orphaning and not to_dead and _counted_over(job, max_orphanings):
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
        script_keys = [source, target, *listing]
        args: list[Any] = [wire(raw), new, queue, score]
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


def _counted_over(job: dict[str, Any], max_orphanings: int) -> bool:
    """Count one more orphaning in ``job`` (in place); True once past ``max_orphanings``."""
    try:
        job["orphan_count"] = int(job.get("orphan_count") or 0) + 1
    except (TypeError, ValueError):
        job["orphan_count"] = 1
    return bool(job["orphan_count"] > max_orphanings)


# The shutdown hand-over (fetch.py's hand_over) ----------------------------------------------


class HandedBack:
    """A job that was running when its worker stopped, requeued by the hand-over. The
    interruption counts as an orphaning: a job that never finishes (an infinite loop, a
    call that never returns) outlives every SHUTDOWN_TIMEOUT, and without the count it
    would come back after every stop, forever. Past MAX_ORPHANINGS it goes to dead
    instead (``target`` is then the dead set, ``score`` its time; else ``score`` is "")."""

    def __init__(self, raw: str, queue: str, home: str) -> None:
        self.job = payload.decode(wire(raw))
        self.to_dead = False
        max_orphanings = conf.get().MAX_ORPHANINGS
        # Bytes that are no payload go back as they are (a processor files them in dead).
        unparseable = self.job["func"] == payload.UNPARSEABLE
        if not unparseable and _counted_over(self.job, max_orphanings):
            failures.to_dead(
                self.job,
                "OrphanedTooOften",
                f"interrupted {self.job['orphan_count'] - 1} times by a worker's stop or "
                f"death (MAX_ORPHANINGS = {max_orphanings}): a job that never finishes "
                "comes back after every stop; give it a time limit, @job(timeout=...)",
            )
            self.to_dead = True
        if self.to_dead:
            self.target, self.score = keys.dead(home), repr(time.time())
        else:
            self.job["enqueued_at"] = time.time()
            self.target, self.score = priority.return_key(queue), ""
        # Built in Python, never by Lua (rule 3).
        self.payload = raw_text(raw) if unparseable else payload.encode(self.job)

    def describe(self) -> str:
        """For the shutdown line: ``func (jid …, interrupted N times)``."""
        job = self.job
        return f"{job.get('func')} (jid {job.get('jid')}, interrupted {job.get('orphan_count')}x)"

    def filed(self) -> None:
        """After the hand-over moved it: a job sent to dead leaves (locks, listeners)."""
        if self.to_dead:
            log.error(
                "%s (jid %s) filed in dead: %s",
                self.job["func"],
                self.job["jid"],
                self.job.get("error_message"),
            )
            departures.job_left(self.job, self.job.get("error_message") or "interrupted too often")


def shutdown_advice(handed: list[HandedBack]) -> str:
    """What the shutdown line adds for the jobs it interrupted: their names, and the
    time limit that keeps a job that never ends from coming back after every stop."""
    if not handed:
        return ""
    return (
        f"; interrupted mid-run: {', '.join(h.describe() for h in handed)}; each stop that "
        f"interrupts a job counts toward MAX_ORPHANINGS ({conf.get().MAX_ORPHANINGS}), then "
        "it goes to dead: a job that may never finish needs @job(timeout=...)"
    )
