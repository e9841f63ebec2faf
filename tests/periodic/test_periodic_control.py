"""periodic/control.py, what the admin and ``api.PeriodicEntries`` use: entries with
their state, disable / enable, run now (respecting the running lock)."""

from __future__ import annotations

import json
import time

import pytest
from django.test import override_settings

from cogworker_django.api import periodic as control
from cogworker_django.store import keys

# (an entry may be the database's too: names are looked up there after the settings)
pytestmark = pytest.mark.django_db

ENTRIES = {
    "report": {"cron": "0 3 * * *", "job": "testapp.jobs.periodic_tick", "timezone": "Asia/Tokyo"},
    "exclusive": {
        "cron": "*/5 * * * * *",
        "job": "testapp.jobs.periodic_span",
        "args": [1],
        "queue": "low",
        "unique": "until_executed",
    },
}


@pytest.fixture(autouse=True)
def periodic_settings():
    with override_settings(COGWORKER_PERIODIC=ENTRIES):
        yield


def _by_name():
    return {row["name"]: row for row in control.entries()}


def test_entries_show_configuration_and_state(r):
    rows = _by_name()
    assert set(rows) == {"report", "exclusive"}
    report = rows["report"]
    assert report["cron"] == "0 3 * * *"
    assert report["timezone"] == "Asia/Tokyo"
    assert report["job"] == "testapp.jobs.periodic_tick"
    assert report["queue"] == "default"
    assert report["unique"] is None
    assert report["args"] == [] and report["kwargs"] == {}
    assert report["last_run"] is None
    assert report["enabled"] is True
    assert report["lock_holder"] is None
    now = time.time()
    assert now < report["next_run"] <= now + 86400
    assert time.gmtime(report["next_run"]).tm_hour == 18  # 03:00 in Tokyo
    assert rows["exclusive"]["next_run"] <= now + 5

    r.set(keys.periodic_last_slot("report"), "1700000000")
    r.set(keys.periodic_running("exclusive"), "somejid")
    rows = _by_name()
    assert rows["report"]["last_run"] == 1700000000.0
    assert rows["exclusive"]["lock_holder"] == "somejid"


def test_disable_and_enable(r):
    assert control.disable("report") is True
    assert control.disable("report") is False
    assert r.smembers(keys.periodic_disabled()) == {"report"}
    assert _by_name()["report"]["enabled"] is False
    assert _by_name()["exclusive"]["enabled"] is True
    assert control.enable("report") is True
    assert _by_name()["report"]["enabled"] is True
    with pytest.raises(KeyError):
        control.disable("nope")


def test_unreadable_state_reads_as_enabled_and_unknown(r):
    r.set(keys.periodic_disabled(), "not a set")
    r.rpush(keys.periodic_last_slot("report"), "x")
    rows = _by_name()
    assert rows["report"]["enabled"] is True
    assert rows["report"]["last_run"] is None


def test_run_now_pushes_one_run_outside_the_slots(r):
    control.disable("report")  # run now works while disabled
    jid = control.run_now("report")
    (raw,) = r.lrange(keys.queue("default"), 0, -1)
    job = json.loads(raw)
    assert job["jid"] == jid
    assert job["func"] == "testapp.jobs.periodic_tick"
    assert job["periodic"] == "report"
    assert "periodic_slot" not in job
    assert not r.exists(keys.periodic_last_slot("report"))


def test_run_now_respects_the_running_lock(r):
    jid = control.run_now("exclusive")
    assert jid
    (raw,) = r.lrange(keys.queue("low"), 0, -1)
    assert json.loads(raw)["periodic_until_executed"] is True
    assert r.get(keys.periodic_running("exclusive")) == jid
    assert 0 < r.ttl(keys.periodic_running("exclusive")) <= 86400
    assert control.run_now("exclusive") is None  # a run holds the lock
    assert r.llen(keys.queue("low")) == 1
    assert _by_name()["exclusive"]["lock_holder"] == jid
    r.delete(keys.periodic_running("exclusive"))
    assert control.run_now("exclusive")


def test_run_now_releases_the_lock_when_the_push_fails(r):
    r.set(keys.queue("low"), "not a list")  # the push fails (WRONGTYPE)
    with pytest.raises(Exception, match="WRONGTYPE"):
        control.run_now("exclusive")
    assert not r.exists(keys.periodic_running("exclusive"))
