"""api.PeriodicEntries, api.History and api.Quarantine over the real modules, and the
"not available" path when a module is missing (they are loaded lazily)."""

import pytest

from cogworker_django import history, keyguard, keys
from cogworker_django.api import History, PeriodicEntries, Quarantine, Unavailable
from cogworker_django.api import optional as optional_mod

from .api_support import make_job

PERIODIC = {
    "every-minute": {"cron": "* * * * *", "job": "testapp.jobs.record", "args": ["p"]},
    "locked": {
        "cron": "0 3 * * *",
        "job": "testapp.jobs.noop",
        "unique": "until_executed",
        "timezone": "Europe/Paris",
        "queue": "low",
    },
}


@pytest.fixture
def periodic(settings):
    settings.COGWORKER_PERIODIC = PERIODIC


def test_periodic_entries_and_actions(periodic, r):
    api = PeriodicEntries()
    assert api.available()
    entries = {e.name: e for e in api.list()}
    assert set(entries) == set(PERIODIC)
    e = entries["locked"]
    assert (e.cron, e.timezone, e.queue, e.unique, e.job) == (
        "0 3 * * *",
        "Europe/Paris",
        "low",
        "until_executed",
        "testapp.jobs.noop",
    )
    assert e.enabled and e.next_run is not None and e.last_run is None and e.lock_holder == ""
    assert entries["every-minute"].call_text == '"p"'

    api.disable("locked")
    assert not api.get("locked").enabled
    api.enable("locked")
    assert api.get("locked").enabled

    jid = api.run_now("locked")
    assert jid and api.get("locked").lock_holder == jid
    assert api.run_now("locked") is None  # its running lock is held
    assert r.llen(keys.queue("low")) == 1
    with pytest.raises(KeyError):
        api.disable("no-such-entry")


def test_history_wrapper(r):
    mw = history.HistoryMiddleware()
    mw(make_job("a.b"), "default", lambda: None)
    history.flush()
    try:
        runs = History().query(job="a.b")
        assert [x.job for x in runs] == ["a.b"] and runs[0].status == "success"
        assert runs[0].started_at is not None and runs[0].duration is not None
        assert History().query(status="failed") == []
        assert History().summary()["count"] == 1
    finally:
        history.buffer.clear()


def test_quarantine_wrapper(r):
    r.set(keys.schedule(), "oops")
    keyguard.check()
    q = Quarantine()
    rows = q.list()
    assert [x.original_key for x in rows] == [keys.schedule()]
    assert rows[0].type == "string" and rows[0].moved_at is not None and rows[0].ttl > 0
    assert "oops" in q.preview(rows[0].key)
    assert q.delete(rows[0].key)
    assert q.list() == []


def test_missing_module_is_unavailable(monkeypatch):
    from cogworker_django.api import periodic

    monkeypatch.setattr(periodic, "MODULE", "cogworker_django.not_there.control")
    assert not PeriodicEntries.available()
    with pytest.raises(Unavailable):
        PeriodicEntries().list()


def test_import_errors_inside_a_module_are_not_hidden(tmp_path, monkeypatch):
    (tmp_path / "broken_feature.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError):
        optional_mod.load("broken_feature")
    assert optional_mod.load("no_such_feature_module") is None
