"""Whether this process runs tests, and whether its jobs may reach Redis then.

In a test run, an ``enqueue`` with no ``TESTING`` mode set is recorded as in
``testing.fake()`` instead of being pushed: a test must never push to the development
Redis, where a running worker would run it against the development database. A test run
is one where the pytest plugin is loaded, or Django's test environment is set up
(``manage.py test``, pytest-django, any runner that calls
``django.test.utils.setup_test_environment()``: it creates ``mail.outbox``).

A test asks for the real Redis with ``@pytest.mark.cogworker_redis``, the
``cogworker_redis`` fixture, :func:`real_redis` or ``COGWORKER["TESTING"] = "redis"``; a
whole suite with ``cogworker_redis = true`` in its pytest configuration.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..store import runtime


class _TestRun:
    """What this process knows of the test run it may be (registered for the process's
    life: store/runtime.registered; a test's fresh runtime keeps it)."""

    def __init__(self) -> None:
        # Set by the pytest plugin at configure time: "fake" (the default in a pytest run)
        # or "redis" (the ``cogworker_redis`` ini option). None: no plugin, so a test run
        # is told by Django's test environment.
        self.session_default: str | None = None
        # Depth of real_redis() blocks (the marker and the fixture use one); process-wide,
        # as the test-mode sinks are, so a job's own enqueues in a worker thread of the
        # test see it too.
        self.real_redis = 0
        # Called when the session default changes (conf forgets its cached settings:
        # their PREFIX is the test prefix in a test run).
        self.listeners: list[Callable[[], Any]] = []
        self.mail: Any = None  # django.core.mail's namespace, on first use


def _run() -> _TestRun:
    return runtime.registered(_TestRun)


_lock = threading.Lock()


def on_session_change(listener: Callable[[], Any]) -> None:
    _run().listeners.append(listener)


def set_session_default(mode: str | None) -> None:
    run = _run()
    run.session_default = mode
    for listener in run.listeners:
        listener()


def _django_test_environment() -> bool:
    run = _run()
    if run.mail is None:
        from django.core import mail

        run.mail = mail.__dict__
    # The module's dict, not hasattr(): a missing name goes through the module's
    # __getattr__ (Django's deprecation shim) and an AttributeError, about 5 µs, and
    # conf.get() asks on every read.
    return "outbox" in run.mail


def in_test_run() -> bool:
    """Whether this process runs tests: the pytest plugin is loaded, or Django's test
    environment is set up. (Cheap, about 0.1 µs: conf.get() asks on every read.)"""
    run = _run()
    if run.session_default is not None:
        return True
    mail = run.mail
    return "outbox" in mail if mail is not None else _django_test_environment()


def worker_suffix() -> str:
    """``_gwN`` in a pytest-xdist worker, ``_N`` in a worker of Django's parallel test
    runner, else "": parallel test processes each get a test prefix of their own."""
    import os

    xdist = os.environ.get("PYTEST_XDIST_WORKER")
    if xdist:
        return f"_{xdist}"
    runner = sys.modules.get("django.test.runner")
    number = getattr(runner, "_worker_id", 0) if runner is not None else 0
    return f"_{number}" if isinstance(number, int) and number > 0 else ""


def real_redis_asked() -> bool:
    """True inside :func:`real_redis` (the marker, the fixture)."""
    return _run().real_redis > 0


def default_mode() -> str | None:
    """The test mode of an enqueue for which nothing else chose one: "fake" in a test
    run, else None (Redis)."""
    session_default = _run().session_default
    if session_default is not None:
        return None if session_default == "redis" else session_default
    return "fake" if _django_test_environment() else None


@contextlib.contextmanager
def real_redis() -> Iterator[None]:
    """Inside the block, jobs go to Redis even in a test run (and whatever the
    ``TESTING`` setting says); a ``testing.fake()`` or ``inline()`` block inside it still
    wins."""
    run = _run()
    with _lock:
        run.real_redis += 1
    try:
        yield
    finally:
        with _lock:
            run.real_redis -= 1
