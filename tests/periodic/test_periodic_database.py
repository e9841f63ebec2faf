"""Periodic entries kept in the database, with real workers (two or three at once), real
Redis, on SQLite and PostgreSQL: every change reaches the runs within 10 s, and every
slot fires once (slots read from the runs' payloads, tests/periodic/db_support.py)."""

from __future__ import annotations

import math
import time

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
