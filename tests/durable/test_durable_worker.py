"""Durable enqueue with real processes and real faults: a web process killed right after
its commit, Redis stopped at the commit, a relay killed between its push and its delete,
and 10,000 rows relayed by three workers at once. (SQLite and PostgreSQL:
tests/durable_support.py; real workers: tests/helpers.Worker.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from django.db import transaction
from testapp import jobs as tj

from cogworker_django.models import OutboxEntry

from .. import durable_support
from ..helpers import MAIN_REDIS_URL, ROOT, wait_until

pytestmark = durable_support.durable_db
db_alias = durable_support.db_alias

# A web process: enqueues durable jobs in one transaction, and is SIGKILLed at a point
# of its commit that argv names: "after-commit" (before its own relay), or "after-push"
# (its relay has pushed, not yet deleted the rows).
WEB = r"""
import os, signal, sys
import django
django.setup()
from django.db import transaction
from testapp import jobs as tj
from cogworker_django.durable import relay

alias, where, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
die = lambda *_: os.kill(os.getpid(), signal.SIGKILL)
with transaction.atomic(using=alias):
    if where == "after-commit":
        transaction.on_commit(die, using=alias)  # before the relay's (registered later)
    else:
        relay.after_push = die
    jids = tj.record.using(durable=True, using_db=alias).enqueue_many(
        [(f"web-{i}",) for i in range(count)]
    )
    print(" ".join(jids), flush=True)
print("survived", flush=True)
"""


def web(prefix, alias, where, count=3, redis_url=MAIN_REDIS_URL):
    proc = subprocess.run(
        [sys.executable, "-c", WEB, alias, where, str(count)],
        env={
            **os.environ,
            **durable_support.worker_env(),
            "DJANGO_SETTINGS_MODULE": "testproject.test_settings",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "testproject"), str(ROOT)]),
            "COGWORKER_PREFIX": prefix,
            "COGWORKER_REDIS_URL": redis_url,
            "COGWORKER_SETTINGS_JSON": "{}",
        },
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(ROOT),
    )
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert "survived" not in proc.stdout
    return proc.stdout.split()


def runs(r, prefix):
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def rows(alias):
    return OutboxEntry.objects.using(alias).count()


def start_worker(worker, **kwargs):
    env = {**durable_support.worker_env(), **kwargs.pop("env", {})}
    return worker(env=env, **kwargs)


def test_a_web_process_killed_right_after_its_commit_loses_no_job(db_alias, worker, r, prefix):
    jids = web(prefix, db_alias, "after-commit")
    assert rows(db_alias) == 3  # committed, never relayed
    assert r.llen(f"{prefix}:queue:default") == 0
    start_worker(worker)
    wait_until(lambda: len(runs(r, prefix)) == 3, 30, message="the three jobs ran")
    assert runs(r, prefix) == {f"web-{i}": 1 for i in range(3)}
    assert rows(db_alias) == 0
    assert len(jids) == 3


def test_at_the_production_timings_a_worker_relays_a_dead_web_processs_rows(
    db_alias, worker, r, prefix
):
    """The poller's interval (POLL_INTERVAL, 5 s) and every other timing at its default:
    the rows of a web process killed after its commit are pushed within a poll or two."""
    from cogworker_django.conf import DEFAULTS

    from ..helpers import FAST_SETTINGS

    production = {k: DEFAULTS[k] for k in FAST_SETTINGS if k != "RETRY_BACKOFF"}
    assert production["POLL_INTERVAL"] == 5.0
    start_worker(worker, settings=production)
    web(prefix, db_alias, "after-commit")  # (its rows left: the test above shows it)
    wait_until(lambda: len(runs(r, prefix)) == 3, 60, message="the three jobs ran")
    assert runs(r, prefix) == {f"web-{i}": 1 for i in range(3)}
    assert rows(db_alias) == 0


def test_a_relay_killed_between_its_push_and_its_delete_pushes_nothing_twice(
    db_alias, worker, r, prefix
):
    jids = web(prefix, db_alias, "after-push")
    assert rows(db_alias) == 3  # its transaction died with it
    queued = [json.loads(raw)["jid"] for raw in r.lrange(f"{prefix}:queue:default", 0, -1)]
    assert sorted(queued) == sorted(jids)  # pushed once, by the killed relay
    start_worker(worker)
    # (on SQLite after the killed relay's turn expires: relay.SQLITE_LOCK_TTL)
    wait_until(lambda: rows(db_alias) == 0, 60, message="the rows deleted by a worker")
    wait_until(lambda: len(runs(r, prefix)) == 3, 30, message="the three jobs ran")
    time.sleep(1)  # a second push would run within this
    assert runs(r, prefix) == {f"web-{i}": 1 for i in range(3)}


def test_redis_stopped_at_the_commit_every_job_runs_once_when_it_is_back(
    db_alias, worker, redis_server, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    start_worker(worker, redis_url=server.url)
    server.stop()
    tokens = []
    for t in range(4):  # four transactions, none raises
        with transaction.atomic(using=db_alias):
            batch = [f"outage-{t}-{i}" for i in range(5)]
            tj.record.using(durable=True, using_db=db_alias).enqueue_many([(x,) for x in batch])
            tj.record.using(durable=True, using_db=db_alias).enqueue_in(0.5, f"outage-{t}-in")
            tokens += [*batch, f"outage-{t}-in"]
    assert rows(db_alias) == len(tokens)
    server.start()
    r = server.client()
    wait_until(lambda: len(runs(r, prefix)) == len(tokens), 60, message="every job ran")
    wait_until(lambda: rows(db_alias) == 0, 10, message="the rows deleted")
    time.sleep(1)
    assert runs(r, prefix) == dict.fromkeys(tokens, 1)


def test_10000_rows_relayed_by_three_workers_at_once_are_each_pushed_once(
    db_alias, worker, configure, r, prefix
):
    # Three workers polling; none takes jobs from "bulk", so the queue shows each push.
    workers = [
        start_worker(
            worker, wait=False, args=["-q", "elsewhere"], env={"COGWORKER_LOG_LEVEL": "DEBUG"}
        )
        for _ in range(3)
    ]
    for w in workers:
        w.wait_for_log(r"cogworker \S+ started", timeout=60)
    # Committed while this process can't reach Redis (a closed port): its own relay fails
    # and the rows are the workers'.
    configure(REDIS_URL="redis://127.0.0.1:1/0")
    with transaction.atomic(using=db_alias):
        jids = tj.record.using(durable=True, using_db=db_alias, queue="bulk").enqueue_many(
            [(str(i),) for i in range(10_000)]
        )
    wait_until(lambda: rows(db_alias) == 0, 120, interval=0.5, message="every row relayed")
    listed = [json.loads(raw)["jid"] for raw in r.lrange(f"{prefix}:queue:bulk", 0, -1)]
    assert len(listed) == 10_000
    assert sorted(listed) == sorted(jids)  # each exactly once
    # The pushes each worker counted (lua/outbox_relay.lua said "pushed"): 10,000 in all.
    pushed = [
        sum(int(n) for n in re.findall(r"durable outbox: (\d+) jobs pushed", w.log()))
        for w in workers
    ]
    assert sum(pushed) == 10_000, pushed
    # Whether the work is shared depends on when each poller wakes (one may relay all
    # 10,000 before the others look); that two relays at once skip each other's rows is
    # shown deterministically by test_durable_relay.py::test_two_relays_at_once_never_take_the_same_row.


def test_a_database_lost_during_the_relay_is_said_once_and_its_rows_pushed_once_after(
    db_alias, r, prefix, caplog
):
    """PostgreSQL: the relay's connection is killed by the server between its push and
    its delete (pg_terminate_backend), then the database refuses connections (a port
    nothing listens on) for a few polls. The worker's chore says so once, without a
    backoff; when the database answers again the rows are deleted and nothing is pushed
    twice (the markers)."""
    import logging

    import pytest
    from django.db import connections

    from cogworker_django.durable import chore, relay
    from cogworker_django.store import connection

    if db_alias != "durable_pg":
        pytest.skip("a server to lose: PostgreSQL")
    with transaction.atomic(using=db_alias):
        jids = tj.record.using(durable=True, using_db=db_alias).enqueue_many([("a",), ("b",)])
        relay.after_read = lambda rows: (_ for _ in ()).throw(RuntimeError("not now"))
    relay.after_read = None
    assert rows(db_alias) == 2  # the pusher's relay was stopped: the worker's turn
    settings_dict = connections[db_alias].settings_dict
    port = settings_dict["PORT"]
    killer = connections.create_connection(db_alias)

    def lose_the_database(pushed):
        pid = connections[db_alias].connection.info.backend_pid
        with killer.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        settings_dict["PORT"] = 1  # and refuse new connections

    relay.after_push = lose_the_database
    work = chore.Chore()
    try:
        with caplog.at_level(logging.WARNING, logger="cogworker_django"):
            work.run_once(connection.get_client())
            relay.after_push = None
            work.run_once(connection.get_client())
            work.run_once(connection.get_client())
        said = [m for m in caplog.messages if f"database {db_alias!r} unavailable" in m]
        assert len(said) == 1, caplog.messages
        assert work.backoff.ready(relay.COMPONENT)
        assert sorted(j["jid"] for j in json_queue(r, prefix)) == sorted(jids)  # pushed once
    finally:
        relay.after_push = None
        settings_dict["PORT"] = port
        killer.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        work.run_once(connection.get_client())
    assert f"database {db_alias!r} recovered" in caplog.text
    assert rows(db_alias) == 0
    assert sorted(j["jid"] for j in json_queue(r, prefix)) == sorted(jids)  # not again
    assert all(0 < r.ttl(m) <= relay.MARKER_KEEP for m in r.keys(f"{prefix}:relayed:*"))


def json_queue(r, prefix):
    return [json.loads(raw) for raw in r.lrange(f"{prefix}:queue:default", 0, -1)]
