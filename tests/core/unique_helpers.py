"""Helpers shared by the tests/core/test_unique_*.py files."""

from __future__ import annotations

import json

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from testapp import jobs as tj

from cogworker_django.core import unique
from cogworker_django.store import keys


def lock_of(*args, queue: str = "default", func: str = tj.record.path, **kwargs) -> str:
    """The unique lock key of ``func(*args, **kwargs)`` on ``queue``."""
    return keys.unique(unique.digest(func, args, kwargs, queue), keys.home_of("default"))


def queued(r: redis.Redis, queue: str = "default") -> list[dict]:
    """Jobs on a queue, newest first."""
    return [json.loads(x) for x in r.lrange(keys.queue(queue), 0, -1)]


def stop_keeping_data(server) -> None:
    """Stop a private redis-server so that its data survives a restart (SHUTDOWN SAVE
    writes dump.rdb into the server's dir, which ``server.start()`` loads again)."""
    c = redis.Redis(port=server.port, retry=Retry(NoBackoff(), 0), socket_timeout=5)
    try:
        c.execute_command("SHUTDOWN", "SAVE")
    except redis.ConnectionError:
        pass  # the server closes the connection as it exits
    finally:
        c.close()
    server.proc.wait(10)
    server.proc = None
