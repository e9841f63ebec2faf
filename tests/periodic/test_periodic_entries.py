"""COGWORKER_PERIODIC validation: each bad entry raises ImproperlyConfigured naming the
entry and the field, in ``manage.py check`` and in ``load()``. (At worker start, and
``migrate`` going on: tests/worker/test_worker_command.py.)"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from cogworker_django import checks
from cogworker_django.periodic import entries

GOOD = {"cron": "*/5 * * * *", "job": "testapp.jobs.periodic_tick"}


@pytest.mark.parametrize(
    "field, value, why",
    [
        ("cron", "61 * * * *", "out of range"),
        ("cron", "* * * *", "5 fields"),
        ("cron", "* * * * * * *", "got 7"),
        ("cron", None, "cron expression"),
        ("job", "testapp.jobs.not_there", "not a registered @job"),
        ("job", "os.system", "not a registered @job"),
        ("job", 42, "dotted path"),
        ("timezone", "Mars/Olympus", "not a known time zone"),
        ("timezone", 3, "time zone name"),
        ("unique", "until_started", "None or 'until_executed'"),
        ("args", "abc", "list"),
        ("args", [object()], "JSON"),
        ("kwargs", [1], "dict"),
        ("kwargs", {"when": object()}, "JSON"),
        ("kwargs", {1: 2}, "string keys"),  # JSON would turn 1 into "1"
        ("queue", "two words", "queue name"),
        ("queue", "", "queue name"),
    ],
)
def test_a_bad_field_names_the_entry_and_the_field(field, value, why):
    raw = {"nightly": {**GOOD, field: value}}
    with override_settings(COGWORKER_PERIODIC=raw):
        with pytest.raises(ImproperlyConfigured) as info:
            entries.load()
    message = str(info.value)
    assert "COGWORKER_PERIODIC['nightly']" in message
    assert f"[{field!r}]" in message
    assert why in message


@pytest.mark.parametrize(
    "raw, why",
    [
        ({"nightly": {"job": "testapp.jobs.periodic_tick"}}, "['cron'] = None"),
        ({"nightly": {**GOOD, "every": 5}}, "unknown field(s) 'every'"),
        ({"nightly": "0 3 * * *"}, "must be a dict"),
        ({"two words": GOOD}, "entry name 'two words'"),
        ([GOOD], "must be a dict of name -> entry"),
    ],
)
def test_bad_entries(raw, why):
    with override_settings(COGWORKER_PERIODIC=raw):
        with pytest.raises(ImproperlyConfigured) as info:
            entries.load()
    assert why in str(info.value)


def test_defaults_come_from_the_job_and_time_zone():
    b = {**GOOD, "job": "testapp.jobs.takes_anything", "args": [1]}
    raw = {"a": GOOD, "b": {**b, "queue": "low", "timezone": "Asia/Tokyo"}}
    with override_settings(COGWORKER_PERIODIC=raw, TIME_ZONE="Europe/Paris"):
        a, b = entries.load()
    assert (a.name, a.queue, a.timezone, a.unique, a.args, a.kwargs) == (
        "a",
        "default",
        "Europe/Paris",
        None,
        (),
        {},
    )
    assert (b.queue, b.timezone, b.args) == ("low", "Asia/Tokyo", (1,))


def test_the_job_payload_of_a_run():
    raw = {
        "e": {
            **GOOD,
            "job": "testapp.jobs.takes_anything",
            "unique": "until_executed",
            "args": [2],
            "kwargs": {"k": "v"},
        }
    }
    with override_settings(COGWORKER_PERIODIC=raw):
        (entry,) = entries.load()
    job = entry.build_job(slot=1700000000)
    assert job["func"] == "testapp.jobs.takes_anything"
    assert (job["args"], job["kwargs"], job["queue"]) == ([2], {"k": "v"}, "default")
    assert job["periodic"] == "e"
    assert job["periodic_slot"] == 1700000000
    assert job["periodic_until_executed"] is True
    manual = entry.build_job()
    assert "periodic_slot" not in manual and manual["jid"] != job["jid"]


def test_system_check_reports_each_bad_entry():
    raw = {"ok": GOOD, "bad1": {**GOOD, "cron": "nope"}, "bad2": {**GOOD, "job": "x.y"}}
    with override_settings(COGWORKER_PERIODIC=raw):
        messages = checks.check_periodic()
    assert [m.id for m in messages] == ["cogworker.E101", "cogworker.E101"]
    assert "'bad1']['cron']" in messages[0].msg
    assert "'bad2']['job']" in messages[1].msg
    with override_settings(COGWORKER_PERIODIC={"ok": GOOD}):
        assert checks.check_periodic() == []


def test_every_bad_field_of_an_entry_is_named_at_once():
    bad = {"cron": "61 * * * *", "job": "x.y", "timezone": "Mars/Olympus", "unique": "always"}
    with override_settings(COGWORKER_PERIODIC={"nightly": bad}):
        with pytest.raises(ImproperlyConfigured) as info:
            entries.load()
    lines = str(info.value).splitlines()
    assert [line.split("]")[1] + "]" for line in lines] == [
        "['timezone']",
        "['cron']",
        "['job']",
        "['unique']",
    ]
    assert all(line.startswith("COGWORKER_PERIODIC['nightly']") for line in lines)


def test_a_mistyped_job_path_gets_did_you_mean():
    raw = {"e": {**GOOD, "job": "testapp.jobs.periodic_tik"}}
    with override_settings(COGWORKER_PERIODIC=raw), pytest.raises(ImproperlyConfigured) as caught:
        entries.load()
    assert "not a registered @job (did you mean 'testapp.jobs.periodic_tick'?)" in str(caught.value)
    assert "COGWORKER['JOB_MODULES']" in str(caught.value)


def test_arguments_the_job_does_not_take_are_refused():
    raw = {"e": {**GOOD, "args": [1]}}  # periodic_tick() takes none
    with override_settings(COGWORKER_PERIODIC=raw), pytest.raises(ImproperlyConfigured) as caught:
        entries.load()
    assert "['args'] = [1] is invalid" in str(caught.value)
    assert "too many positional arguments" in str(caught.value)
