"""pytest plugin: jobs stay in the test process unless a test asks for Redis.

In a pytest run, an enqueue for which no ``TESTING`` mode is set is recorded as in
``testing.fake()`` (and the record is emptied after each test), never pushed to the Redis
of ``COGWORKER`` (a development worker would run it against the development database).
A test that wants the real Redis says so:

    @pytest.mark.cogworker_redis
    def test_pushes(): ...

    def test_pushes_too(cogworker_redis): ...

and a whole suite with ``cogworker_redis = true`` in its pytest configuration (ini,
pyproject's ``[tool.pytest.ini_options]``). In a pytest run every key is under a test
prefix of its own (``COGWORKER["TEST_PREFIX"]``, default ``"test_"`` + PREFIX, with the
xdist worker's number: conf.for_tests), so a development worker reading PREFIX on the
same Redis never takes a test's job. Fixtures ``cogworker_fake`` and
``cogworker_inline`` run a test in those modes (see testing.py).

    def test_signup(cogworker_fake):
        signup("a@example.com")
        assert len(send_welcome.jobs) == 1

``cogworker_worker`` starts a real worker inside the test process, against the real
Redis (worker/inprocess.py); each one started is stopped after the test:

    def test_welcome_is_sent(cogworker_worker, r):
        w = cogworker_worker(queues=["default"], concurrency=2)
        signup("a@example.com")
        w.run_until(lambda: r.get("sent") == b"1")
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from .core import testrun

INI_OPTION = "cogworker_redis"
MARKER = "cogworker_redis"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        INI_OPTION,
        type="bool",
        default=False,
        help="cogworker: let every test's jobs reach the Redis of COGWORKER (by default "
        "they are recorded as in testing.fake())",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: cogworker jobs enqueued by this test go to the real Redis of COGWORKER "
        "(by default they are recorded as in testing.fake())",
    )
    testrun.set_session_default("redis" if config.getini(INI_OPTION) else "fake")


def pytest_unconfigure(config: pytest.Config) -> None:
    testrun.set_session_default(None)


@pytest.fixture(autouse=True)
def _cogworker_test_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test: Redis when marked ``cogworker_redis``; afterwards the record of jobs
    that the default fake mode kept is emptied, so no test sees another's."""
    if request.node.get_closest_marker(MARKER) is not None:
        with testrun.real_redis():
            yield
    else:
        yield
    # Imported by the app's ready(); absent when the test run never set Django up.
    testing: Any = sys.modules.get("cogworker_django.testing")
    if testing is not None:
        testing.clear()


@pytest.fixture
def cogworker_redis() -> Iterator[None]:
    """Jobs enqueued by this test go to the real Redis of ``COGWORKER``."""
    with testrun.real_redis():
        yield


@pytest.fixture
def cogworker_worker() -> Iterator[Any]:
    """A function that starts an in-process worker (its keyword arguments are
    ``InProcessWorker``'s) and returns it, started; the test's jobs go to the real Redis."""
    from cogworker_django.worker.inprocess import InProcessWorker

    started: list[InProcessWorker] = []

    def start(**options: Any) -> InProcessWorker:
        w = InProcessWorker(**options)
        started.append(w)
        return w.start()

    with testrun.real_redis():
        try:
            yield start
        finally:
            for w in reversed(started):
                w.stop()


@pytest.fixture
def cogworker_fake() -> Iterator[Any]:
    from cogworker_django import testing

    with testing.fake():
        yield testing


@pytest.fixture
def cogworker_inline() -> Iterator[Any]:
    from cogworker_django import testing

    with testing.inline():
        yield testing
