"""What an edit of a database entry does to its slots, with tickers in this process on a
fixed clock (``tick(now)``, and the save's own clock: ``stored.clock``), on SQLite and
PostgreSQL: a new entry fires none of the slots before it; an edit fires no slot twice
and skips none after it, even in the very second a slot comes due; a deleted or renamed
entry fires nothing more, even from a worker that has not seen the change yet (the
fence); a bad row never stops the others. Two Ticker objects stand for two workers."""

from __future__ import annotations

import json
import logging

import pytest
from testapp import jobs as tj  # noqa: F401 - registers the jobs the entries name

from cogworker_django.models import PeriodicEntry
from cogworker_django.periodic import entries, source, stored, ticker
from cogworker_django.periodic.ticker import Ticker
from cogworker_django.store import connection, keys

from . import db_support as db

pytestmark = db.database
db_alias = db.db_alias

T0 = 1_800_000_000  # a whole hour (and minute) in UTC


@pytest.fixture
def at(monkeypatch):
    """``at(t)``: the saves that follow happen at epoch ``t``."""

    def set_clock(t: float) -> None:
        monkeypatch.setattr(stored, "clock", lambda: t)

    return set_clock


def make_ticker(alias, *configured, **kwargs) -> Ticker:
    names = [e.name for e in configured]
    database = source.DatabaseEntries(reserved=names, alias=alias)
    kwargs.setdefault("started_at", T0 - 3600)
    t = Ticker(configured, database=database, **kwargs)
    return t


def queued(r, queue="default"):
    return [json.loads(x) for x in reversed(r.lrange(keys.queue(queue), 0, -1))]


def fired(r):
    return [(j["periodic"], j["periodic_slot"], j["args"]) for j in queued(r)]


def test_a_new_entry_fires_none_of_the_slots_before_it(db_alias, at, r):
    a = make_ticker(db_alias)
    at(T0 + 30)  # the T0 slot of "* * * * *" passed before the entry existed
    db.add(db_alias, "new", "* * * * *")
    a.tick(now=T0 + 31)
    assert fired(r) == []
    a.tick(now=T0 + 60.1)
    assert fired(r) == [("new", T0 + 60, [])]
    # An entry created in the very second of a slot is there for that slot.
    at(T0 + 120.4)
    db.add(db_alias, "same-second", "* * * * *")
    a.tick(now=T0 + 120.5)
    assert fired(r)[-1] == ("same-second", T0 + 120, [])


def test_an_edit_in_the_second_a_slot_comes_due_fires_it_once(db_alias, at, r):
    at(T0 - 100)
    db.add(db_alias, "e", "* * * * *", args=[1])
    a, b = make_ticker(db_alias), make_ticker(db_alias)
    a.tick(now=T0 - 1)
    assert fired(r) == [("e", T0 - 60, [1])]
    # The T0 slot came due; nobody fired it yet; the edit lands 0.4 s after it.
    at(T0 + 0.4)
    db.change(db_alias, "e", args=[2])
    for t in (a, b, a, b):
        t.tick(now=T0 + 0.5)
    assert fired(r) == [("e", T0 - 60, [1]), ("e", T0, [2])]
    # A worker that fired T0 before the edit and one that sees the edit: still once.
    at(T0 + 60.3)
    a.tick(now=T0 + 60.2)  # fires T0+60 with the args it has
    db.change(db_alias, "e", args=[3])
    b.tick(now=T0 + 60.4)
    a.tick(now=T0 + 60.5)
    assert [s for _, s, _ in fired(r)] == [T0 - 60, T0, T0 + 60]
    a.tick(now=T0 + 120.1)
    assert fired(r)[-1] == ("e", T0 + 120, [3])


def test_a_slot_due_before_an_edit_that_no_worker_fired_yet_still_fires_once(db_alias, at, r):
    at(T0 - 100)
    db.add(db_alias, "e", "* * * * *")
    a = make_ticker(db_alias)
    a.tick(now=T0 - 1)
    # T0 came due; the workers are slow (a tick every 5 s, a busy machine); at T0 + 3 the
    # cron line changes to one that has no T0 slot: T0 was due, it still fires (once).
    at(T0 + 3)
    db.change(db_alias, "e", cron="30 * * * * *")  # second 30 of every minute
    row = PeriodicEntry.objects.using(db_alias).get(name="e")
    assert row.owed_slot == T0
    a.tick(now=T0 + 4)
    make_ticker(db_alias).tick(now=T0 + 5)
    assert [s for _, s, _ in fired(r)] == [T0 - 60, T0]
    a.tick(now=T0 + 20)  # nothing new: T0 + 30 is the new line's first
    a.tick(now=T0 + 30.1)
    a.tick(now=T0 + 60.1)  # not a slot of the new line any more
    assert [s for _, s, _ in fired(r)] == [T0 - 60, T0, T0 + 30]


def test_a_new_cron_line_fires_none_of_its_past_slots(db_alias, at, r):
    at(T0 - 100)
    db.add(db_alias, "e", "0 * * * *")  # hourly: T0 fires
    a = make_ticker(db_alias)
    a.tick(now=T0 + 1)
    at(T0 + 700)  # to every ten minutes at T0 + 700: T0 + 600 is past, not fired
    db.change(db_alias, "e", cron="*/10 * * * *")
    a.tick(now=T0 + 701)
    make_ticker(db_alias).tick(now=T0 + 702)
    assert [s for _, s, _ in fired(r)] == [T0]
    a.tick(now=T0 + 1200.1)
    assert [s for _, s, _ in fired(r)] == [T0, T0 + 1200]


def test_a_worker_that_has_not_seen_a_delete_fires_nothing_of_it(db_alias, at, r):
    at(T0 - 100)
    db.add(db_alias, "e", "* * * * *")
    a = make_ticker(db_alias)
    a.tick(now=T0 + 0.1)
    (entry,) = a.schedule.database.snapshot.entries
    fence = a._fence
    db.delete(db_alias, "e")  # the version moves on at the commit
    # A claim made with the version read before the delete is refused, and writes nothing.
    job = entry.build_job(slot=T0 + 60)
    conn = connection.get_client()
    claim = ticker.claim(conn, entry, T0 + 60, job, T0 + 60.1, a.identity, fence)
    assert claim.code == "stale"
    assert r.get(keys.periodic_last_slot("e")) == str(T0)
    a.tick(now=T0 + 60.2)  # reads the table again: no entry
    assert a.entries == []
    assert [s for _, s, _ in fired(r)] == [T0]
    # A settings entry claims with no fence at all: a version bump never stops it.
    settings_entry = entries.parse_entry("s", {"cron": "* * * * *", "job": db.NOTE})
    sjob = settings_entry.build_job(slot=T0 + 60)
    assert ticker.claim(conn, settings_entry, T0 + 60, sjob, T0 + 60.1, "x", "0").code == "claimed"


def test_a_renamed_entry_fires_its_slot_once_under_one_name(db_alias, at, r):
    at(T0 - 100)
    db.add(db_alias, "old", "* * * * *")
    a, b = make_ticker(db_alias), make_ticker(db_alias)
    a.tick(now=T0 + 0.1)
    b.tick(now=T0 + 0.2)
    at(T0 + 30)
    db.change(db_alias, "old", name="new")
    b.tick(now=T0 + 30.1)  # sees it: "new" has no slot before T0 + 30
    # "a" still runs "old" at its last version: its claim of T0 + 60 is refused ...
    (stale,) = [e for e in a.entries if e.name == "old"]
    job = stale.build_job(slot=T0 + 60)
    claim = ticker.claim(connection.get_client(), stale, T0 + 60, job, T0 + 60, "a", a._fence)
    assert claim.code == "stale"
    for t in (a, b):
        t.tick(now=T0 + 60.1)
    assert [(n, s) for n, s, _ in fired(r)] == [("old", T0), ("new", T0 + 60)]


def test_a_deleted_and_recreated_entry_fires_none_of_its_past_slots(db_alias, at, r):
    at(T0 - 100)
    db.add(db_alias, "e", "0 * * * *")
    a = make_ticker(db_alias)
    a.tick(now=T0 + 1)
    at(T0 + 10)
    db.delete(db_alias, "e")
    at(T0 + 20)
    db.add(db_alias, "e", "*/10 * * * *")  # T0 is one of its slots: not again
    a.tick(now=T0 + 21)
    assert [s for _, s, _ in fired(r)] == [T0]
    a.tick(now=T0 + 600.1)
    assert [s for _, s, _ in fired(r)] == [T0, T0 + 600]


def test_a_bad_row_is_said_once_and_the_others_fire(db_alias, at, r, caplog):
    at(T0 - 100)
    db.add(db_alias, "good", "* * * * *")
    # A row whose job is gone (a deploy removed it): written past the validation.
    PeriodicEntry.objects.using(db_alias).create(
        name="gone", cron="* * * * *", job="testapp.jobs.nope"
    )
    a = make_ticker(db_alias)
    with caplog.at_level(logging.INFO, "cogworker_django"):
        a.tick(now=T0 + 0.1)
        a.schedule.database.read("again")
        a.tick(now=T0 + 60.1)
    assert [(n, s) for n, s, _ in fired(r)] == [("good", T0), ("good", T0 + 60)]
    said = [m for m in caplog.messages if "'gone'" in m]
    assert len(said) == 1 and "not a registered @job" in said[0], said


def test_a_settings_entry_wins_over_a_row_of_its_name(db_alias, at, r, settings, caplog):
    raw = {"cron": "* * * * *", "job": db.NOTE, "args": ["settings"]}
    settings.COGWORKER_PERIODIC = {"shared": raw}
    row = PeriodicEntry(name="shared", cron="* * * * *", job=db.NOTE, args=["db"])
    with pytest.raises(Exception, match="COGWORKER_PERIODIC"):
        row.full_clean(validate_unique=False)
    row.save(using=db_alias)  # past the validation (the setting came later, say)
    a = make_ticker(db_alias, entries.parse_entry("shared", raw))
    with caplog.at_level(logging.INFO, "cogworker_django"):
        a.tick(now=T0 + 0.1)
    assert fired(r) == [("shared", T0, ["settings"])]
    assert "settings win" in caplog.text
