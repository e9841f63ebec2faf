"""Error classification, best-effort writes and the log-once outage reporter."""

import logging
import time

import pytest
import redis.exceptions as rx

from cogworker_django.store import errors


@pytest.mark.parametrize(
    "exc",
    [
        rx.ConnectionError("Connection refused"),
        rx.TimeoutError("Timeout reading from socket"),
        rx.BusyLoadingError("LOADING Redis is loading the dataset in memory"),
        rx.ReadOnlyError("READONLY You can't write against a read only replica."),
        rx.ResponseError("UNBLOCKED force unblock from blocking operation"),
        rx.ResponseError("MASTERDOWN Link with MASTER is down"),
        rx.ResponseError("BUSY Redis is busy running a script"),
        rx.ResponseError("OOM command not allowed when used memory > 'maxmemory'."),
        ConnectionResetError(104, "Connection reset by peer"),
    ],
)
def test_unavailable(exc):
    assert errors.is_unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        rx.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        rx.ResponseError("ERR value is not an integer or out of range"),
        rx.DataError("Invalid input"),
        ValueError("bad data"),
    ],
)
def test_deterministic(exc):
    assert not errors.is_unavailable(exc)


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no")


def test_safe_str_never_raises():
    assert "Unprintable" in errors.safe_str(Unprintable())
    assert errors.describe(Unprintable()).startswith("Unprintable: ")


def test_outage_logged_once_then_recovered_once(caplog):
    caplog.set_level(logging.INFO, logger="cogworker_django")
    for _ in range(50):
        errors.report("Fetch", rx.ConnectionError("refused"))
    errors.recovered("Fetch")
    errors.recovered("Fetch")
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, m in lines if "unavailable" in m] == ["WARNING"]
    assert [level for level, m in lines if "recovered" in m] == ["INFO"]  # good news


def test_a_failure_heard_after_a_later_success_is_no_second_outage(caplog):
    """Two threads fetch around Redis's return: one's attempt fails, the other's, begun
    later, succeeds, and the first reports only then (it lost the CPU between). One
    outage, one recovery; an attempt begun after the recovery is news again."""
    caplog.set_level(logging.INFO, logger="cogworker_django")
    errors.report("Fetch", rx.ConnectionError("refused"), began=time.monotonic())
    stale = time.monotonic()
    errors.recovered("Fetch")
    errors.report("Fetch", rx.ConnectionError("refused"), began=stale)
    assert not errors.reporter.is_down("Fetch")
    lines = [r.getMessage() for r in caplog.records]
    assert sum("unavailable" in m for m in lines) == 1 and sum("recovered" in m for m in lines) == 1
    errors.report("Fetch", rx.ConnectionError("refused"), began=time.monotonic())
    assert errors.reporter.is_down("Fetch")
    assert sum("unavailable" in r.getMessage() for r in caplog.records) == 2


def test_deterministic_errors_are_logged_each_time(caplog):
    caplog.set_level(logging.ERROR, logger="cogworker_django")
    for _ in range(3):
        errors.report("Heartbeat", rx.ResponseError("WRONGTYPE x"))
    assert sum("WRONGTYPE" in r.getMessage() for r in caplog.records) == 3


def test_best_effort_reports_and_returns_false(caplog):
    def boom():
        raise rx.ResponseError("WRONGTYPE")

    assert errors.best_effort("History", boom) is False
    assert errors.best_effort("History", lambda: None) is True
