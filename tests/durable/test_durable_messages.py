"""What a newcomer reads from a durable enqueue: before `migrate`, an error that says to
run it (not the driver's bare "no such table"); from `manage.py shell` with Redis down,
a line that says who pushes the committed job later (not "retrying", which that
process never does). Each in a `manage.py shell` of the test project, as a user types."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ..helpers import ROOT, free_port, run_command

ENQUEUE = (
    "from django.db import transaction\n"
    "from testapp import jobs\n"
    "try:\n"
    "    with transaction.atomic():\n"
    "        print('jid', jobs.record.using(durable=True).enqueue('a'))\n"
    "except Exception as exc:\n"
    "    print('raised', type(exc).__name__, exc)\n"
)


def _shell(prefix, tmp_path, migrate, redis_url=None):
    db = tmp_path / "fresh.sqlite3"
    env = {"TESTPROJECT_DB": str(db), "DJANGO_SETTINGS_MODULE": "testproject.test_settings"}
    extra = {"redis_url": redis_url} if redis_url else {}
    if migrate:
        done = run_command(prefix, "migrate", "-v", "0", env=env, **extra)
        assert done.returncode == 0, done.stderr
    return run_command(prefix, "shell", "--no-imports", "-c", ENQUEUE, env=env, **extra)


def test_a_durable_enqueue_before_migrate_says_to_run_it(prefix, tmp_path):
    done = _shell(prefix, tmp_path, migrate=False)
    out = done.stdout + done.stderr
    assert "raised OperationalError" in out, out  # the driver's class, kept for handlers
    assert "no such table: cogworker_django_outboxentry" in out
    assert (
        "the durable outbox table cogworker_django_outboxentry does not exist in database "
        "'default': run `manage.py migrate cogworker_django --database default`"
    ) in out


def test_the_shell_says_a_worker_pushes_the_job_when_redis_is_back(prefix, tmp_path):
    nobody = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    done = _shell(prefix, tmp_path, migrate=True, redis_url=nobody)
    out = done.stdout + done.stderr
    assert "jid " in out, out  # committed: the row waits in the outbox
    line = next(x for x in out.splitlines() if "Durable outbox relay" in x)
    assert "left in the outbox: Redis unavailable" in line
    assert "a worker pushes it when Redis is back (this process does not retry)" in line
    assert "retrying until it is back" not in out


@pytest.mark.django_db(databases=["durable_sqlite"], transaction=True)
def test_a_hung_redis_holds_the_commit_for_the_socket_timeout(redis_server, configure):
    """Documented in docs/jobs.md: when Redis hangs (a stopped server: connections open,
    no answer) the relay after the commit waits for the socket timeout, 10 s at the
    default REDIS_OPTIONS, and the committing caller with it; the row is committed all
    the while and waits for a worker."""
    from django.db import transaction
    from testapp import jobs as tj

    from cogworker_django.models import OutboxEntry
    from cogworker_django.store import connection

    server = redis_server()
    configure(REDIS_URL=server.url)
    connection.get_client().ping()  # a pooled connection, open before the hang
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with transaction.atomic(using="durable_sqlite"):
            jid = tj.record.using(durable=True, using_db="durable_sqlite").enqueue("h")
        held = time.monotonic() - started
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert 5 < held < 60, held  # the 10 s socket timeout, with room for a busy machine
    assert [row.jid for row in OutboxEntry.objects.using("durable_sqlite")] == [jid]
    doc = (ROOT / "docs" / "jobs.md").read_text()
    assert "when Redis *hangs*" in doc and "10 seconds by default" in doc
