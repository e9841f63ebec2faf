"""Periodic entries kept in the database, with real workers (two or three at once), real
Redis, on SQLite and PostgreSQL: every change reaches the runs within 10 s, and every
slot fires once (slots read from the runs' payloads, tests/periodic/db_support.py).

The database stopped while workers run (SQLite held by an exclusive lock; PostgreSQL
behind a forwarder that is closed, as a stopped server): the workers go on firing the
last schedule they read, say so once, and once more when it answers again; the next
change is then seen as usual."""

from __future__ import annotations

import math
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

EVERY_SECOND = "* * * * * *"
# A change must reach the runs within this (the contract: 10 s).
CHANGE_SEEN = 10


def first_after(runs: list[dict], when: float, **match) -> dict | None:
    found = [n for n in runs if n["slot"] > when and all(n[k] == v for k, v in match.items())]
    return min(found, key=lambda n: n["slot"]) if found else None


def test_add_edit_disable_enable_delete_while_three_workers_run(db_alias, worker, r, prefix):
    db.start_workers(worker, db_alias, 3)
    name = "db-tick"

    def runs():
        return db.notes(r, prefix, name)

    added = time.time()
    db.add(db_alias, name, EVERY_SECOND, args=[1])
    wait_until(lambda: first_after(runs(), added - 1), CHANGE_SEEN, message="the added entry's run")
    wait_until(lambda: len(runs()) >= 3, 15, message="three runs")

    edited = time.time()
    args_done = db.change(db_alias, name, args=[2], kwargs={"lang": "fr"})
    wait_until(lambda: first_after(runs(), edited, args=[2]), CHANGE_SEEN, message="new args")
    wait_until(lambda: len([n for n in runs() if n["args"] == [2]]) >= 3, 15, message="3 runs")

    recron = time.time()
    cron_done = db.change(db_alias, name, cron="*/2 * * * * *")
    wait_until(lambda: first_after(runs(), cron_done + 2), CHANGE_SEEN, message="the new cron")

    disabled = db.change(db_alias, name, enabled=False)
    time.sleep(3)  # three slots pass while it is disabled: none may fire
    enabled = db.change(db_alias, name, enabled=True)
    wait_until(lambda: first_after(runs(), enabled), CHANGE_SEEN, message="a run after enable")
    wait_until(lambda: len([n for n in runs() if n["slot"] > enabled]) >= 2, 15, message="2 runs")

    deleted = db.delete(db_alias, name)
    time.sleep(3)  # nothing more
    every = db.once_each(runs())
    slots = sorted(every)

    # Added: its first slot is the second it was created in or a later one (none of the
    # slots before it existed), within 10 s.
    assert slots[0] >= math.floor(added)
    assert every[slots[0]]["at"] - added < CHANGE_SEEN
    # Edited (args): the old arguments never run a slot after the save returned; the new
    # ones run within 10 s; no slot between is skipped (every second fires).
    old = [s for s in slots if every[s]["args"] == [1]]
    new = [s for s in slots if every[s]["args"] == [2]]
    assert max(old) < min(new) and max(old) <= args_done
    assert every[min(s for s in new if s > edited)]["at"] - edited < CHANGE_SEEN
    assert all(every[s]["kwargs"] == {"lang": "fr"} for s in new)
    before_cron = [s for s in slots if s <= recron]
    assert before_cron == list(range(slots[0], before_cron[-1] + 1)), "a skipped slot"
    # Edited (cron): only even seconds once the save returned, every one of them.
    after_cron = [s for s in slots if s > cron_done and s <= disabled]
    assert after_cron and all(s % 2 == 0 for s in after_cron), after_cron
    assert after_cron == list(range(after_cron[0], after_cron[-1] + 1, 2))
    assert every[after_cron[0]]["at"] - recron < CHANGE_SEEN
    # Disabled: nothing after the save returned; enabled: no burst of the missed slots,
    # then every (even) slot again.
    assert [s for s in slots if disabled < s <= enabled] == []
    after_enable = [s for s in slots if enabled < s <= deleted]
    assert after_enable == list(range(after_enable[0], after_enable[-1] + 1, 2))
    assert every[after_enable[0]]["at"] - enabled < CHANGE_SEEN
    # Deleted: nothing after the delete returned.
    assert [s for s in slots if s > deleted] == []


def test_an_edit_at_the_very_second_a_slot_comes_due(db_alias, worker, r, prefix):
    """Edits landing just before, at and just after a slot's second (every 3 s, two
    workers): that slot fires once, with the old arguments or the new, and none after
    the edit is skipped or doubled."""
    db.start_workers(worker, db_alias, 2)
    name = "edge"
    db.add(db_alias, name, "*/3 * * * * *", args=[0])
    wait_until(lambda: db.notes(r, prefix, name), 15, message="a first run")
    edits = []
    for i, offset in enumerate((-0.05, 0.0, 0.02, 0.3, 1.0), start=1):
        slot = (math.floor(time.time()) // 3 + 2) * 3  # a slot at least 3 s away
        wait_until(lambda s=slot, o=offset: time.time() >= s + o, 10, 0.002, message="the edge")
        db.change(db_alias, name, args=[i])
        edits.append((slot, offset, i))
    last_edit_slot = edits[-1][0]
    wait_until(
        lambda: max(n["slot"] for n in db.notes(r, prefix, name)) >= last_edit_slot + 6,
        15,
        message="two slots after the last edit",
    )
    every = db.once_each(db.notes(r, prefix, name))
    slots = sorted(every)
    assert slots == list(range(slots[0], slots[-1] + 1, 3)), "a slot skipped"
    for slot, offset, i in edits:
        # The edge slot ran with the arguments of the edit or of the one before it; the
        # next slot with this edit's.
        assert every[slot]["args"] in ([i], [i - 1]), (slot, offset, every[slot])
        assert every[slot + 3]["args"] in ([i], [i + 1]), (slot, offset, every[slot + 3])


def test_at_the_production_timings_a_change_reaches_the_runs_within_10s(
    db_alias, worker, r, prefix
):
    from cogworker_django.conf import DEFAULTS

    from ..helpers import FAST_SETTINGS

    production = {k: DEFAULTS[k] for k in FAST_SETTINGS if k != "RETRY_BACKOFF"}
    assert production["PERIODIC_TICK"] == 5.0
    probe = {"probe": {"cron": "* * * * * *", "job": "testapp.jobs.periodic_tick"}}
    db.start_workers(worker, db_alias, 2, settings=production, periodic=probe)
    # Their tickers run (the first tick waits for the first orphan pass).
    wait_until(lambda: r.hlen(f"{prefix}:test:slots") >= 1, 60, 0.2, message="ticking")
    added = time.time()
    db.add(db_alias, "every-second", EVERY_SECOND)
    wait_until(lambda: db.notes(r, prefix, "every-second"), CHANGE_SEEN, 0.1, message="a run")
    first = db.notes(r, prefix, "every-second")[0]
    assert first["at"] - added < CHANGE_SEEN
    deleted = db.delete(db_alias, "every-second")
    time.sleep(6)  # more than a tick
    every = db.once_each(db.notes(r, prefix, "every-second"))
    assert every and max(every) <= deleted


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
