"""The I/O every peer's ``incr`` task does: one INCR of the done counter in its system's
own database (one connection pool per worker process, shared by its threads)."""

from __future__ import annotations

import redis

from bench.targets import DONE_KEY, LATENCY_KEY, url_for

_clients: dict[str, redis.Redis] = {}


def _client(system: str) -> redis.Redis:
    client = _clients.get(system)
    if client is None:  # two threads racing here build two pools: harmless
        client = _clients[system] = redis.Redis.from_url(url_for(system))
    return client


def count_done(system: str) -> None:
    _client(system).incr(DONE_KEY)


def stamp(system: str, token: str) -> None:
    """The trickle scenario's job: when it started (bench/trickle.py)."""
    import time

    _client(system).hset(LATENCY_KEY, token, time.time())
