"""Jobs that leave the system without a settling run (departures.py): their locks go,
and a django.tasks task's result becomes FAILED with the reason."""

import datetime as dt
import logging

import pytest
from testapp import jobs as tj

from cogworker_django import api
from cogworker_django.core import departures
from cogworker_django.core.departures import JobLeft
from cogworker_django.store import keys


def test_a_deleted_unique_job_releases_its_lock(r):
    tj.record.using(unique="until_executed").enqueue_in(600, "u")
    [lock] = [k for k in r.scan_iter(match=f"{keys.prefix()}:unique:*")]
    [record] = api.ScheduledSet().page(0, 10)
    assert api.ScheduledSet().delete(record).name == "DONE"
    assert not r.exists(lock)


def test_a_failing_listener_never_stops_the_others(caplog):
    seen = []

    def broken(job, reason):
        raise RuntimeError("listener bug")

    def recording(job, reason):
        seen.append((job["jid"], reason))

    before = list(departures.listeners())
    try:
        departures.listeners()[:] = [broken, recording]
        with caplog.at_level(logging.WARNING, logger="cogworker_django"):
            departures.job_left({"jid": "j1", "func": "f"}, "deleted")
    finally:
        departures.listeners()[:] = before
    assert seen == [("j1", "deleted")]
    # The broken one is not silent: its failure is logged, once, with its text.
    failures = [r for r in caplog.records if "listener bug" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno >= logging.WARNING, caplog.text
    assert "Departure" in failures[0].getMessage()


def test_a_deleted_scheduled_task_has_a_failed_result(r):
    pytest.importorskip("django.tasks")
    from django.tasks import TaskResultStatus
    from testapp import tasks as tt

    result = tt.add.using(run_after=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).enqueue(1, 2)
    [record] = api.ScheduledSet().page(0, 10)
    assert record.jid == result.id
    api.ScheduledSet().delete(record)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path == "cogworker_django.departures.JobLeft"
    assert result.errors[-1].exception_class is JobLeft  # the path imports
    assert "deleted from schedule by an operator" in result.errors[-1].traceback
