"""Where each system's jobs live: one Redis server, one database number per system.

Every system gets its own database so that FLUSHDB before and after a run touches only
that system's keys. Database 0 is never used (it is where applications usually live).
The worker subprocesses read the same environment variables, so the bench process and
its workers always agree on the target.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
# 9..15: high numbers that a default Redis (16 databases) has and that apps rarely use.
DEFAULT_DB_BASE = 9
DB_OFFSETS = {
    "cogworker": 0,
    "rq": 1,
    "dramatiq": 2,
    "huey": 3,
    "celery": 4,
    "sidekiq": 5,
    "bullmq": 6,
}
# The queue every system is told to use, so the key names below are predictable.
QUEUE = "bench"
# The I/O job (``--job incr``, the default) counts itself done here (INCR), in its
# system's own database: one Redis round trip per job, as a real job does some I/O.
DONE_KEY = "bench:done"
# The trickle scenario's job (``python -m bench.trickle``) stamps when it started here
# (HSET, field = the token it was pushed with, value = epoch seconds).
LATENCY_KEY = "bench:started"


class BenchError(Exception):
    """A run could not be measured; the message says why (shown in the table)."""


def base_url() -> str:
    return os.environ.get("BENCH_REDIS_URL") or DEFAULT_REDIS_URL


def db_for(system: str) -> int:
    db = int(os.environ.get("BENCH_DB_BASE", DEFAULT_DB_BASE)) + DB_OFFSETS[system]
    if db <= 0:
        raise BenchError(f"refusing to use Redis database {db} for {system}: the bench flushes it")
    return db


def with_db(url: str, db: int) -> str:
    """``url`` pointed at database ``db`` (any database in the URL is replaced)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"]
    if parts.scheme == "unix":
        query.append(("db", str(db)))
        return urlunsplit(parts._replace(query=urlencode(query)))
    return urlunsplit(parts._replace(path=f"/{db}", query=urlencode(query)))


def url_for(system: str) -> str:
    return with_db(base_url(), db_for(system))


def redacted(url: str) -> str:
    """The URL without its password, for printing."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def client_for(system: str) -> redis.Redis:
    return redis.Redis.from_url(url_for(system))


def flush(system: str) -> int:
    """FLUSHDB the system's own database; returns how many keys it held."""
    client = client_for(system)
    try:
        if client.connection_pool.connection_kwargs.get("db", 0) == 0:
            raise BenchError(f"refusing to flush database 0 ({redacted(url_for(system))})")
        size = client.dbsize()
        client.flushdb()
        return size
    finally:
        client.close()
