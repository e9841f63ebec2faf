"""Every test of the port runs with a real worker in this process (worker/inprocess.py)
on the queues Django's tests use, under the test's own prefix (tests/conftest.py)."""

import django
import pytest

from . import support

# django.tasks arrived in Django 6.0.
collect_ignore_glob = [] if django.VERSION >= (6, 0) else ["test_*.py", "tasks.py"]


@pytest.fixture(autouse=True)
def port_worker(inworker):
    from cogworker_django.worker import plugins

    # Every plugin but the durable outbox relay: it reads the database, which Django's
    # SimpleTestCase classes forbid (and no test here writes an outbox row).
    kept = [p for p in plugins.builtin() if not isinstance(p, plugins.Durable)]
    worker = inworker(
        queues=["default", "queue_1", "queue-1"], concurrency=2, plugins=kept
    )
    support.worker = worker
    yield worker
    support.worker = None
