"""The queue listing, ``P:queues``: where the admin, the poller (with a home per queue,
to find each home's schedule) and the key guard find every queue. Every write of it from
Python goes through here; the scripts that can list a queue in the same step as a move
take it as a key (``Home.listing_keys``).

A listing write never fails the write it rides with (rule 1): the client reports its
failure (:func:`report`) and lists the queue again with a later push; an outage is
retried with the next push, a deterministic error (``P:queues`` of the wrong type,
until the key guard moves it) after :data:`REFRESH`, never an error line per push
(rule 5).
"""

from __future__ import annotations

import time
from typing import Any

from . import errors, keys, runtime

# How long this process trusts that a queue is listed in P:queues before listing it again
# (when it last listed each is its runtime's: runtime.py).
REFRESH = 60.0


def add(target: Any, *queues: str) -> Any:
    """SADD ``queues`` to the listing: sent on a client, queued on a pipeline."""
    return target.sadd(keys.queues(), *queues)


def remove(target: Any, *queues: str) -> Any:
    return target.srem(keys.queues(), *queues)


def due(queue: str) -> bool:
    """Whether this process should list ``queue`` with its next write (not listed by it
    in the last :data:`REFRESH` seconds, under the current prefix); True marks it listed."""
    now = time.monotonic()
    key = (keys.prefix(), queue)
    rt = runtime.current()
    with rt.listing_lock:
        if now - rt.listed.get(key, -REFRESH) < REFRESH:
            return False
        rt.listed[key] = now
        return True


def forget(queue: str) -> None:
    """List ``queue`` again with the next write (its listing may not have been written)."""
    rt = runtime.current()
    with rt.listing_lock:
        rt.listed.pop((keys.prefix(), queue), None)


def forget_all() -> None:
    rt = runtime.current()
    with rt.listing_lock:
        rt.listed.clear()


def report(result: Any, *queues: str) -> None:
    """The outcome of a listing write: a failure reported once (errors.report), the
    queues listed again with the next write after an outage."""
    if isinstance(result, Exception):
        if errors.is_unavailable(result):
            for queue in queues:
                forget(queue)
        names = ", ".join(repr(q) for q in queues)
        errors.report("Queue listing", result, f"{keys.queues()} not updated for {names}")
    else:
        errors.recovered("Queue listing")
