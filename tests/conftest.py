"""Fixtures shared by the suite.

Every test gets its own key prefix on the real Redis at COGWORKER_REDIS_URL (default
redis://127.0.0.1:6379/0), removed afterwards, so tests never see each other's keys and
may run in parallel.
"""

from __future__ import annotations

import secrets

import pytest
import redis
from django.test import override_settings

from cogworker_django import connection, errors, locks, stats, testing

from .helpers import MAIN_REDIS_URL, RedisServer, Worker


def _delete_prefix(client: redis.Redis, prefix: str) -> None:
    batch = []
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            client.delete(*batch)
            batch.clear()
    if batch:
        client.delete(*batch)


@pytest.fixture(scope="session", autouse=True)
def test_project_jobs():
    """The test project's job modules, registered under its own settings (their
    ``limits`` name its COGWORKER["LIMITS"]) before any test narrows COGWORKER."""
    import testapp.jobs  # noqa: F401


@pytest.fixture
def prefix() -> str:
    return f"t{secrets.token_hex(5)}"


@pytest.fixture(autouse=True)
def cogworker_settings(prefix, settings):
    """Point the app at the test Redis under this test's own prefix."""
    value = {"REDIS_URL": MAIN_REDIS_URL, "PREFIX": prefix}
    with override_settings(COGWORKER=value):
        yield value
    client = redis.Redis.from_url(MAIN_REDIS_URL)
    try:
        _delete_prefix(client, prefix)
    finally:
        client.close()
    connection.reset()
    errors.reporter.reset()
    locks.deferred.clear()
    stats.counters._counts.clear()
    testing.clear()


@pytest.fixture
def configure(cogworker_settings):
    """Change COGWORKER keys for the rest of the test: ``configure(CONCURRENCY=2)``."""
    stack = []

    def apply(**values):
        merged = {**cogworker_settings, **values}
        o = override_settings(COGWORKER=merged)
        o.enable()
        stack.append(o)
        cogworker_settings.update(values)
        return merged

    yield apply
    for o in reversed(stack):
        o.disable()


@pytest.fixture
def r() -> redis.Redis:
    """A plain client on the test Redis (decoded strings)."""
    client = redis.Redis.from_url(MAIN_REDIS_URL, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def redis_server():
    """Factory for private redis-server processes (killed at the end)."""
    servers: list[RedisServer] = []

    def start(**kwargs) -> RedisServer:
        server = RedisServer(**kwargs).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.cleanup()


@pytest.fixture
def worker(prefix):
    """Factory for real worker subprocesses under this test's prefix (killed at the end)."""
    workers: list[Worker] = []

    def start(*, prefix_: str | None = None, wait: bool = True, **kwargs) -> Worker:
        w = Worker(prefix_ or prefix, **kwargs)
        workers.append(w)
        return w.start(wait=wait)

    yield start
    for w in workers:
        w.cleanup()
