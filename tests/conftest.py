"""Fixtures shared by the suite.

Every test gets its own key prefix on the real Redis at COGWORKER_REDIS_URL (default
redis://127.0.0.1:6379/0), removed afterwards, so tests never see each other's keys and
may run in parallel. A test marked ``cluster`` runs twice, on that Redis and on a local
Redis Cluster (tests/cluster_support.py).
"""

from __future__ import annotations

import logging
import re
import secrets

import pytest
import redis
from django.test import override_settings

from cogworker_django import testing
from cogworker_django.store import connection, runtime

from . import cluster_support
from .helpers import FAST_SETTINGS, MAIN_REDIS_URL, RedisServer, Worker, wait_until


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "cluster: run on a single Redis and on a Redis Cluster (tests/cluster_support.py)",
    )
    config.addinivalue_line(
        "markers",
        "spread: run on a Redis Cluster with a plain PREFIX, so each queue has a home of "
        "its own (keys.spread); such a test builds its key names with keys.*",
    )


def pytest_generate_tests(metafunc):
    # A test on a private redis-server of its own (a fault test) is about that one server:
    # it runs once, on it.
    names = metafunc.fixturenames
    if (
        metafunc.definition.get_closest_marker("cluster")
        and "redis_mode" in names
        and "redis_server" not in names
    ):
        modes = list(cluster_support.MODES)
        if metafunc.definition.get_closest_marker("spread"):
            modes.append("spread")  # and with a home per queue
        metafunc.parametrize("redis_mode", modes, indirect=True)
    elif (
        metafunc.definition.get_closest_marker("spread")
        and "redis_mode" in names
        and "redis_server" not in names
    ):
        metafunc.parametrize("redis_mode", ["spread"], indirect=True)


def _delete_prefix(client: redis.Redis, prefix: str, spread: bool = False) -> None:
    batch = []
    patterns = [f"{prefix}:*"]
    if spread:  # the prefix's home and every queue's (keys.py)
        patterns += ["{" + prefix + "}:*", "{" + prefix + "|*"]
    found = (key for pattern in patterns for key in client.scan_iter(match=pattern, count=1000))
    for key in found:
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
def redis_mode(request) -> str:
    """ "single" (the Redis at MAIN_REDIS_URL), or "cluster" for a test marked cluster."""
    return getattr(request, "param", "single")


@pytest.fixture(scope="session")
def local_cluster():
    """A 3-master Redis Cluster for the session, started on first use (a session
    fixture: its teardown runs in every xdist worker that started one)."""
    cluster = cluster_support.LocalCluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def redis_url(request, redis_mode) -> str:
    if redis_mode in ("cluster", "spread"):
        return request.getfixturevalue("local_cluster").url
    return MAIN_REDIS_URL


@pytest.fixture
def prefix(redis_mode) -> str:
    name = f"t{secrets.token_hex(5)}"
    # A hash tag in cluster mode: the package keeps it as the root of its keys, so a
    # test's f"{prefix}:queue:q" is the key the package builds (keys.root).
    return "{" + name + "}" if redis_mode == "cluster" else name


def _plain_client(redis_mode: str, url: str, **kwargs):
    if redis_mode in ("cluster", "spread"):
        return cluster_support.client(url, **kwargs)
    return redis.Redis.from_url(url, **kwargs)


@pytest.fixture(autouse=True)
def cogworker_settings(prefix, settings, redis_mode, redis_url):
    """Point the app at the test Redis under this test's own prefix."""
    # TEST_PREFIX False: this suite's keys under its own per-test PREFIX, as it is.
    value = {"REDIS_URL": redis_url, "PREFIX": prefix, "TEST_PREFIX": False}
    if redis_mode in ("cluster", "spread"):
        value["CLUSTER"] = True
    with override_settings(COGWORKER=value):
        yield value
    client = _plain_client(redis_mode, redis_url)
    try:
        _delete_prefix(client, prefix, spread=redis_mode == "spread")
    finally:
        client.close()
    # A fresh runtime for the next test (its client, scripts, listing throttle, outage
    # reports, deferred writes, leases: store/runtime.py); this one's client closed.
    connection.close(runtime.current().drop_client())
    runtime.install(runtime.Runtime())
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
def r(redis_mode, redis_url) -> redis.Redis:
    """A plain client on the test Redis (decoded strings); a cluster client in cluster mode."""
    client = _plain_client(redis_mode, redis_url, decode_responses=True)
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


_UNSET = object()

# The test project's limiters (testproject/test_settings.py): a worker checks at boot that
# every registered job's are configured.
PROJECT_LIMITS = {"test-pair": {"concurrency": 2}, "test-rate": {"rate": 3, "per": 2}}


@pytest.fixture
def inworker(request, configure, cogworker_settings, cogworker_worker):
    """Factory for in-process workers (worker/inprocess.py) under this test's prefix, set
    up as the ``worker`` fixture's processes are: the short timings of FAST_SETTINGS, the
    test project's limiters, no periodic entries unless ``periodic`` gives some;
    ``settings`` are COGWORKER keys for the rest of the test, other keywords
    InProcessWorker's. Stopped at the end: ask for ``redis_server`` before this fixture
    when the worker uses one (fixtures end in reverse; the server must outlive it).
    (tests/worker/test_worker_plugins.py runs its in-process workers at the production
    defaults.)"""
    django_settings = request.getfixturevalue("settings")

    def start(*, settings: dict | None = None, periodic: dict | None = None, **options):
        wanted = {"LIMITS": PROJECT_LIMITS, **FAST_SETTINGS, **(settings or {})}
        # Changed settings only: a change rebuilds the process's client (store/connection
        # listens for it), closing connections a worker started earlier is using.
        if any(cogworker_settings.get(k, _UNSET) != v for k, v in wanted.items()):
            configure(**wanted)
        if getattr(django_settings, "COGWORKER_PERIODIC", None) != (periodic or {}):
            django_settings.COGWORKER_PERIODIC = periodic or {}
        return cogworker_worker(periodic=bool(periodic), **options)

    return start


# The line format of testproject/settings.py's LOGGING: what a worker subprocess writes.
WORKER_LOG_FORMAT = (
    "%(asctime)s %(levelname)s pid=%(process)d [%(threadName)s] %(name)s: %(message)s"
)


class WorkerLog(logging.Handler):
    """The package's log lines, formatted as a worker subprocess writes them: what an
    in-process worker logs, for a test that reads a worker's log without its process."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter(WORKER_LOG_FORMAT))
        self.lines: list[str] = []
        self._levels: dict[logging.Logger, int] = {}

    def listen(self, name: str, level: int = logging.INFO) -> WorkerLog:
        """Take the lines of logger ``name`` too, from ``level`` up (until the test ends)."""
        logger = logging.getLogger(name)
        if logger not in self._levels:
            self._levels[logger] = logger.level
            logger.addHandler(self)
        if logger.getEffectiveLevel() > level or logger.level == logging.NOTSET:
            logger.setLevel(level)
        return self

    def close(self) -> None:
        for logger, level in self._levels.items():
            logger.removeHandler(self)
            logger.setLevel(level)
        self._levels.clear()
        super().close()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))  # list.append: safe from any thread

    def log(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines else "")

    def wait_for_log(self, pattern: str, timeout: float = 15.0, count: int = 1) -> None:
        rx = re.compile(pattern)
        try:
            wait_until(lambda: len(rx.findall(self.log())) >= count, timeout, 0.02, pattern)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- worker log ---\n{self.log()[-4000:]}") from None


@pytest.fixture
def worker_log():
    """The ``cogworker_django`` logger's lines during this test (from INFO, as the command
    logs; ``listen()`` adds another logger), with ``log()`` and ``wait_for_log()`` as a
    worker subprocess has them."""
    handler = WorkerLog().listen("cogworker_django")
    yield handler
    handler.close()


@pytest.fixture
def worker(prefix, redis_mode, redis_url):
    """Factory for real worker subprocesses under this test's prefix (killed at the end)."""
    workers: list[Worker] = []

    def start(*, prefix_: str | None = None, wait: bool = True, **kwargs) -> Worker:
        if redis_mode in ("cluster", "spread"):
            kwargs.setdefault("redis_url", redis_url)
            kwargs["env"] = {"COGWORKER_CLUSTER": "1", **(kwargs.get("env") or {})}
        w = Worker(prefix_ or prefix, **kwargs)
        workers.append(w)
        return w.start(wait=wait)

    yield start
    for w in workers:
        w.cleanup()
