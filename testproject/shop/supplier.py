"""A stand-in for the supplier's stock API: each call is kept in Redis
(``<prefix>:test:shop:synced``, the time of each call)."""

import time

from cogworker_django.store import connection

from .gateway import key


def sync(sku: str) -> None:
    connection.get_client().rpush(key("synced"), f"{sku} {time.time()!r}")
