"""Doorbells: how an idle worker learns, within a round trip, that a job was pushed.

A worker whose fetch found every queue empty does not poll them. Its feeder thread waits
in a ``BRPOP`` on the doorbells of the queues it reads (``P:bell:<q>``, a short list in
the queue's home) for up to ``FETCH_IDLE_MAX_INTERVAL``, then fetches. A push that finds
its queue's list empty (the LPUSH's reply is the number it pushed) rings the bell: one
``LPUSH`` of a token and an ``LTRIM`` to :data:`KEEP` tokens. One waiting worker takes
the token and fetches at once; when its fetch filled every free thread it rings again
for the next idle worker (dispatch.py), so a burst wakes as many workers as it needs,
one round trip apart.

Why rings only on an empty list: a queue with jobs waiting has no idle worker to wake
(an idle worker's fetch would have found them), so under load a push costs nothing more;
under a trickle (every push finds the list empty) it costs one more round trip, after
the job is in. A ring is best effort: a failure is swallowed, and the worker's wait ends
at ``FETCH_IDLE_MAX_INTERVAL`` anyway, so a push by any other client (``redis-cli``, an
older release) is found that late at worst, as before doorbells.

A token left in a bell nobody waits on costs the next idle worker one fetch that finds
nothing. Lua scripts that put a job where it waits ring through lua/include/place.lua
(the same two commands) when their push found the list empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import keys

# Tokens kept in a bell: enough for a burst to wake that many idle workers at once; a
# bound, so a bell nobody waits on never grows.
KEEP = 16


def ring(conn: Any, queues: Iterable[str]) -> None:
    """Ring the bells of ``queues`` (best effort: a failure is swallowed, see above)."""
    try:
        pipe = conn.pipeline(transaction=False)
        for queue in queues:
            bell = keys.bell(queue)
            pipe.lpush(bell, 1)
            pipe.ltrim(bell, 0, KEEP - 1)
        pipe.execute(raise_on_error=False)
    except Exception:  # noqa: BLE001, S110 - the waiting workers' timeout finds the job
        pass


def bells(queues: Iterable[str]) -> list[str]:
    """The bell keys of ``queues``, for the idle wait's BRPOP."""
    return [keys.bell(q) for q in queues]


def add(script_keys: list[str], args: list[Any], queue: str) -> None:
    """Give a script that pushes onto ``queue``'s list its doorbell (lua/include/place.lua
    rings it when the push found the list empty): the bell appended to ``script_keys``,
    its index in KEYS (1-based) appended to ``args``."""
    script_keys.append(keys.bell(queue))
    args.append(len(script_keys))
