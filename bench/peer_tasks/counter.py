"""The I/O every peer's ``incr`` task does: one INCR of the done counter in its system's
own database (one connection pool per worker process, shared by its threads)."""

from __future__ import annotations

import redis

from bench.targets import DONE_KEY, url_for

_clients: dict[str, redis.Redis] = {}


def count_done(system: str) -> None:
    client = _clients.get(system)
    if client is None:  # two threads racing here build two pools: harmless
        client = _clients[system] = redis.Redis.from_url(url_for(system))
    client.incr(DONE_KEY)
