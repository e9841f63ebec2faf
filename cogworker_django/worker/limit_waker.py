"""The limiter waker: moves jobs waiting for a limiter to their queues as soon as the
limiter has room (controls/limits.py parks them: filed in the schedule, indexed in
``P:limit:<name>:waiting``).

One per worker process, a chore of the chores thread (background.Chores) due at the next
moment room can appear:

- a lease released in this process (or freed as a dead process's): at once, on the
  releasing thread, so the room is offered before that thread fetches again;
- a rate window with waiting jobs and no room: exactly when its oldest start leaves;
- a job just parked here: at once (a rate refusal's window may already have moved on);
- otherwise every POLL_INTERVAL (room freed by a lease that lapsed, or by another
  process that died before it could tell).

Each look is one script over every limiter (lua/limit_room.lua), returning at most as
many of the oldest waiting jobs as there is room for, less the room of jobs it returned
before that have not reached a processor yet (``P:limit:<name>:offered``, for HOLD
seconds at most): a queue backed up behind other jobs does not draw the whole waiting set
into it. Each is moved by the poller's atomic move (lua/requeue_due.lua: only if still
in the schedule), then dropped from the index. Its cost does not grow with the number of
waiting jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .. import conf
from ..core import payload
from ..store import codec, connection, errors, keys, scripts
from .background import Chore
from .fetch import text
from .poller import move_scheduled

log = logging.getLogger("cogworker_django")

COMPONENT = "Limiter waker"
# The most waiting jobs moved per limiter per look.
MOST_PER_LOOK = 100
# After moving jobs, the next look waits this long (the moved jobs hold their room until
# a processor fetches them, so an early look costs a round trip, never an extra move).
SETTLE = 0.2


def hold() -> float:
    """How long a moved job holds its room before it is fetched: past that the waker
    offers its room again (its process may have died with it fetched; the orphan
    recovery brings the job back, but its room should not wait for that)."""
    return 2 * conf.get().POLL_INTERVAL


def _room_call(chosen: list[Any]) -> tuple[list[str], list[Any]]:
    """The keys and ARGV of lua/limit_room.lua for the limiters ``chosen``."""
    key_list: list[str] = []
    args: list[Any] = [MOST_PER_LOOK, repr(hold())]
    for s in chosen:
        key_list += [keys.limit_leases(s.name), keys.limit_starts(s.name)]
        key_list += [keys.limit_waiting(s.name), keys.limit_offered(s.name)]
        args += [s.concurrency or 0, s.rate or 0, repr(s.per or 0)]
    return key_list, args


class LimitWaker(Chore):
    def __init__(self, nudge: Callable[[], Any] | None = None) -> None:
        super().__init__(COMPONENT, self._look_all, conf.get().POLL_INTERVAL)
        # Tells this process's feeder that jobs were just queued (reliable fetch polls
        # with a pause once the queues run dry: the moved jobs need not wait for it).
        self._nudge = nudge

    def wake_for(self, names: tuple[str, ...], released: bool) -> None:
        """A lease of these limiters was released: look now, on the caller's thread. Or
        a job was parked in them: the waker's loop looks at once and plans its next look
        (the end of a rate window)."""
        if released:
            self.look(names)
        else:
            self.wake()

    def _look_all(self, conn: Any) -> float:
        pause = min(conf.get().POLL_INTERVAL, self.look())
        errors.recovered(COMPONENT)
        return pause

    def look(self, names: tuple[str, ...] | None = None) -> float:
        """Move the waiting jobs that fit now; returns the seconds until room can next
        appear by itself (a rate window), else POLL_INTERVAL."""
        specs = conf.get().LIMITS
        chosen = [specs[n] for n in (names or specs) if n in specs]
        pause = conf.get().POLL_INTERVAL
        if not chosen:
            return pause
        conn = connection.get_client()
        replies = scripts.run("limit_room", conn, *_room_call(chosen))
        for s, (count, wait, members) in zip(chosen, replies, strict=True):
            if members:
                self._move(conn, s.name, [text(m) for m in members])
                if self._nudge is not None:
                    self._nudge()
                pause = min(pause, SETTLE)
            elif int(count) and (codec.number(wait) or 0) > 0:
                pause = min(pause, float(codec.number(wait) or 0))
        return pause

    @staticmethod
    def _move(conn: Any, name: str, members: list[str]) -> None:
        index = keys.limit_waiting(name)
        for raw in members:
            try:
                moved = move_scheduled(conn, raw)
            except Exception as exc:
                if errors.is_unavailable(exc):
                    raise
                log.error("a job waiting for limiter %s not moved: %s", name, errors.describe(exc))
                moved = 0
            if not moved:
                # No longer in the schedule (cancelled, or brought back by its fallback
                # score): the room it was offered is free again at once.
                job = payload.decode(codec.wire(raw))
                conn.zrem(keys.limit_offered(name), str(job.get("jid")))
            # Moved, or gone: either way no longer waiting here. (A moved job refused
            # again is parked under a new payload: the move re-stamps its enqueued_at.)
            conn.zrem(index, raw)
