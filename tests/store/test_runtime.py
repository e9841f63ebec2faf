"""The process's runtime (store/runtime.py) and its deferred writes (store/deferred.py)."""

from __future__ import annotations

import logging
import os

import pytest
import redis

from cogworker_django.core import jobs, locks
from cogworker_django.observe import stats
from cogworker_django.store import connection, errors, runtime
from cogworker_django.store.deferred import Deferred


class _State:
    def __init__(self) -> None:
        self.seen: list[str] = []


def test_each_module_state_is_one_instance_per_runtime_and_a_fresh_runtime_starts_empty():
    rt = runtime.current()
    rt.of(_State).seen.append("x")
    assert rt.of(_State) is rt.of(_State)
    fresh = runtime.install(runtime.Runtime())
    try:
        assert runtime.current() is fresh
        assert fresh.of(_State).seen == []
    finally:
        runtime.install(rt)


def test_a_fresh_runtime_keeps_the_registrations(r):
    """The jobs registered at import stay registered; the client, the deferred writes
    and the counts do not carry over."""
    old = runtime.current()
    client = connection.get_client()
    locks.deferred().add("some-lock", "owner")
    stats.incr("processed")
    fresh = runtime.install(runtime.Runtime())
    try:
        assert jobs.registered("testapp.jobs.noop") is not None
        assert locks.deferred().pending() == {}
        assert stats.pending() == {}
        assert connection.get_client() is not client
        assert errors.reporter is fresh.of(errors.Reporter)
    finally:
        connection.close(fresh.drop_client())
        runtime.install(old)


def test_a_forked_child_drops_the_client_it_inherited(r):
    connection.get_client().ping()
    assert runtime.current().built_client() is not None
    pid = os.fork()
    if pid == 0:  # the child: the parent's sockets must not be used here
        os._exit(0 if runtime.current().built_client() is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert runtime.current().built_client() is not None  # the parent keeps its own


def test_deferred_values_replace_or_merge():
    releases: Deferred[str, str] = Deferred("release of")
    releases.add("k", "old-owner")
    releases.add("k", "new-owner")
    assert releases.pending() == {"k": "new-owner"}
    counts: Deferred[str, int] = Deferred("counts", merge=lambda a, b: a + b)
    counts.add("processed", 2)
    counts.add("processed", 3)
    assert counts.take_all() == {"processed": 5} and counts.pending() == {}
    counts.put_back({"processed": 5})
    counts.add("processed", 1)
    assert counts.pending() == {"processed": 6}


def test_retry_stops_at_the_first_outage_and_keeps_what_is_left():
    pending: Deferred[str, int] = Deferred("write of")
    for key in "abc":
        pending.add(key, 1)
    written = []

    def write(key: str, value: int) -> None:
        if key == "b":
            raise redis.ConnectionError("Redis is away")
        written.append(key)

    with pytest.raises(redis.ConnectionError):
        pending.retry_all(write)
    assert written == ["a"] and pending.pending() == {"b": 1, "c": 1}


def test_a_deterministic_failure_is_dropped_and_logged(caplog):
    pending: Deferred[str, int] = Deferred("write of")
    pending.add("bad", 1)
    pending.add("good", 1)

    def write(key: str, value: int) -> None:
        if key == "bad":
            raise redis.ResponseError("WRONGTYPE Operation against a key")

    with caplog.at_level(logging.ERROR, logger="cogworker_django"):
        assert pending.retry_all(write) == 2
    assert pending.pending() == {}
    assert "deferred write of bad dropped" in caplog.text


def test_a_value_added_while_its_older_one_is_retried_is_kept():
    pending: Deferred[str, str] = Deferred("release of")
    pending.add("k", "first")

    def write(key: str, value: str) -> None:
        pending.add(key, "second")  # a newer failure of the same key, meanwhile

    pending.retry_all(write)
    assert pending.pending() == {"k": "second"}
