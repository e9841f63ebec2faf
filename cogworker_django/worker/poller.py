"""The poller, a chore of the chores thread (background.Chores): moves due jobs from
``P:schedule`` and ``P:retry`` to their queues, and runs the periodic duties that go
with a poll (orphan recovery, filing ``P:unsettled``, the plugins' timers such as the
key guard).

Each due job moves by one script that adds before it removes (rule 2), with the new
payload (``enqueued_at`` re-stamped) built here in Python (rule 3). The poll interval
is random around ``POLL_INTERVAL`` times the number of live processes, so a fleet polls
about every ``POLL_INTERVAL`` in total and never in lockstep.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from .. import conf
from ..core import departures, payload, route
from ..store import bell, connection, errors, homes, keys, listing, outbox, scripts
from .background import Chore
from .fetch import text, wire
from .recovery import OrphanRecovery
from .unsettled import file_unsettled

log = logging.getLogger("cogworker_django")

# Due jobs moved per set per round trip batch; loops until nothing is due.
DUE_BATCH = 100
# Cap on the process-count scaling: a huge fleet still polls each process at least this often.
MAX_SCALE = 10


def enqueue_due(conn: Any, now: float | None = None) -> int:
    """Move every due job of every home's schedule and retry sets to its queue; returns
    how many."""
    moved = 0
    listed: set[str] = set()
    for home in homes.all_homes(conn):
        moved += _enqueue_due_home(conn, home, now, listed)
    if listed:
        # The queue listing is in another slot than the moves (lua/requeue_due.lua).
        errors.best_effort("Scheduled poller", lambda: listing.add(conn, *listed))
    return moved


def _enqueue_due_home(conn: Any, home: str, now: float | None, listed: set[str]) -> int:
    moved = 0
    for source in (keys.schedule(home), keys.retry(home)):
        stuck = 0  # due entries that failed deterministically: skipped this pass (rule 6)
        while True:
            now_ = now if now is not None else time.time()
            due = conn.zrangebyscore(source, "-inf", now_, start=stuck, num=DUE_BATCH)
            if not due:
                break
            for raw in due:
                try:
                    moved += _move(conn, home, source, text(raw), listed)
                except Exception as exc:
                    if errors.is_unavailable(exc):
                        raise
                    # Its target key of the wrong type, say: the key guard moves that
                    # aside; the other due jobs must not wait for it.
                    stuck += 1
                    log.error("a due job in %s not moved: %s", source, errors.describe(exc))
            if len(due) < DUE_BATCH:
                break
    return moved


def move_scheduled(conn: Any, raw: str) -> int:
    """Move one job of the schedule to its queue now, whatever its score (a job waiting
    for a limiter that has room: controls/limits.py); 0 when it is no longer there."""
    job = payload.decode(wire(raw))
    home = homes.Home.of_job(job)
    listed: set[str] = set()
    moved = _move(conn, home, keys.schedule(home), raw, listed)
    if listed:
        errors.best_effort("Scheduled poller", lambda: listing.add(conn, *listed))
    return moved


def _move(conn: Any, home: str, source: str, raw: str, listed: set[str]) -> int:
    job = payload.decode(wire(raw))
    queue = job.get("queue")
    in_slot = homes.Home(home).listing_keys()  # lua/requeue_due.lua: one slot
    why = ""
    if job["func"] == payload.UNPARSEABLE or not isinstance(queue, str) or not queue:
        why = "the job has no queue"
    elif keys.home_of(queue) != home:
        # Its queue's keys are in another slot: one script can't move it there.
        why = f"the job's queue {queue!r} is not in the hash slot of {source}"
    if why:
        # Can't be requeued: bury it in dead with its bytes rather than retry it forever.
        leaving = job
        if job["func"] != payload.UNPARSEABLE:
            job = payload.unparseable(wire(raw), None, "InvalidPayload", why)
        moved = scripts.run(
            "requeue_due",
            conn,
            [source, keys.dead(home), *in_slot],
            [wire(raw), payload.encode(job), "", repr(time.time())],
        )
        if moved:
            departures.job_left(leaving, f"filed in dead: {why}")
        return moved
    assert isinstance(queue, str)  # checked above
    where = route.to_queue(job, time.time())  # its list, or a django.tasks priority's zset
    script_keys, args = (
        [source, where.key, *in_slot],
        [wire(raw), where.value, queue, where.score_arg],
    )
    bell.add(script_keys, args, queue)  # an idle worker starts it at once
    moved = scripts.run("requeue_due", conn, script_keys, args)
    if moved and not in_slot:
        listed.add(queue)  # the script could not list it (another slot): listed apart
    return moved


class Poller:
    def __init__(self, recovery: OrphanRecovery) -> None:
        s = conf.get()
        self.recovery = recovery
        self.interval = s.POLL_INTERVAL
        self.orphan_interval = s.ORPHAN_CHECK_INTERVAL
        self._booted = False
        self._process_count = 1
        # Extra chores: (name, interval, function(conn)); the key guard registers one.
        self.timers: list[tuple[str, float, Callable[[Any], Any]]] = []
        # Chores failing deterministically back off instead of failing every poll (rule 5).
        self.backoff = errors.Backoff()
        self._next_run: dict[str, float] = {}

    def chore(self) -> Chore:
        """The poll as a chore of the chores thread: at start, then every pause."""
        return Chore("Scheduled poller", self.run, self.interval)

    def run(self, conn: Any) -> float:
        """One poll (the first also runs every timer once); returns the pause until the
        next."""
        if not self._booted:
            self._booted = True
            self._boot_chores(conn)
        else:
            self.poll_once(conn)
        return self._pause()

    def _pause(self) -> float:
        scale = min(max(self._process_count, 1), MAX_SCALE)
        return self.interval * scale * random.uniform(0.5, 1.5)

    def _boot_chores(self, conn: Any) -> None:
        now = time.monotonic()
        # The first orphan pass runs on the first poll (it counts nobody's missed beats
        # from before this process's own first beat: OrphanRecovery), then every orphan
        # interval; a pass that could not judge (no clear stretch yet) is retried at the
        # next poll.
        self._next_run["orphans"] = now
        for name, _interval, fn in self.timers:
            errors.best_effort(name, functools.partial(fn, conn))
            self._next_run[name] = now + _interval
        self.poll_once(conn)

    def poll_once(self, conn: Any = None) -> None:
        conn = conn or connection.get_client()
        self.backoff.run("Scheduled poller", lambda: enqueue_due(conn))
        self.backoff.run("Unsettled jobs", lambda: file_unsettled(conn))
        # Batch jobs a pusher left in P:outbox (it died between its script and its relay).
        self.backoff.run("Outbox relay", lambda: outbox.relay_leftovers(conn))

        def count() -> None:
            self._process_count = int(conn.scard(keys.processes()))

        self.backoff.run("Process count", count)
        now = time.monotonic()
        if now >= self._next_run.get("orphans", 0):
            passes: list[int | None] = []
            ran = self.backoff.run(
                "Orphan recovery", lambda: passes.append(self.recovery.run(conn))
            )
            if ran and passes[0] is not None:
                self._next_run["orphans"] = now + self.orphan_interval
        for name, interval, fn in self.timers:
            if now >= self._next_run.get(name, 0):
                errors.best_effort(name, functools.partial(fn, conn))
                self._next_run[name] = now + interval
