"""The database stopped while workers run (SQLite held by an exclusive lock; PostgreSQL
behind a forwarder that is closed, as a stopped server): the workers go on firing the
last schedule they read, say so once, and once more when it answers again; the next
change is then seen as usual. Two real workers, real Redis."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import contextmanager
from urllib.parse import urlsplit

from django.db import connections

from cogworker_django.store import keys

from ..helpers import wait_until
from . import db_support as db

pytestmark = db.database
db_alias = db.db_alias

DOWN = "the database can't be read"
BACK = "the database answers again"


@contextmanager
def outage(alias: str, gate: db.TcpGate | None):
    if gate is not None:
        gate.close()
        try:
            yield
        finally:
            gate.open()
        return
    held = sqlite3.connect(connections[alias].settings_dict["NAME"], timeout=1)
    held.isolation_level = None
    held.execute("BEGIN EXCLUSIVE")  # every other reader: "database is locked"
    try:
        yield
    finally:
        held.execute("ROLLBACK")
        held.close()


def test_a_database_outage_keeps_the_last_schedule_firing(db_alias, worker, r, prefix):
    env, gate = {}, None
    if db_alias == "durable_pg":
        url = urlsplit(os.environ["COGWORKER_TEST_POSTGRES_URL"])
        gate = db.TcpGate(url.hostname or "127.0.0.1", url.port or 5432)
        env["COGWORKER_TEST_POSTGRES_URL"] = url._replace(
            netloc=f"{url.username or 'postgres'}@127.0.0.1:{gate.port}"
        ).geturl()
    try:
        _run(db_alias, worker, r, prefix, env, gate)
    finally:
        if gate is not None:
            gate.close()


def _run(db_alias, worker, r, prefix, env, gate):
    workers = db.start_workers(worker, db_alias, 2, env=env)
    name = "every-3s"
    db.add(db_alias, name, "*/3 * * * * *", args=["before"])
    wait_until(lambda: len(db.notes(r, prefix, name)) >= 2, 15, message="two runs")
    with outage(db_alias, gate):
        down = time.time()
        r.incr(keys.periodic_version())  # as a save would: every worker reads again
        for w in workers:
            w.wait_for_log(DOWN, timeout=20)
        time.sleep(7)  # slots come due: the last schedule read fires them
        back = time.time()
    for w in workers:
        w.wait_for_log(BACK, timeout=20)
    changed = db.change(db_alias, name, args=["after"])
    wait_until(
        lambda: [n for n in db.notes(r, prefix, name) if n["args"] == ["after"]],
        10,
        message="the change after the outage",
    )
    every = db.once_each(db.notes(r, prefix, name))
    during = sorted(s for s in every if down < s <= back)
    assert len(during) >= 2 and during == list(range(during[0], during[-1] + 1, 3)), during
    assert all(every[s]["args"] == ["before"] for s in during)
    assert all(n["args"] == ["after"] for s, n in every.items() if s > changed)
    for w in workers:
        log = w.log()
        assert log.count(DOWN) == 1 and log.count(BACK) == 1, log[-3000:]
