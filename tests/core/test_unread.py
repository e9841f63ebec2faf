"""A push to a queue nobody reads (in no QUEUES setting, read by no live worker) logs one
warning per queue name, with the names it may have meant; the job is pushed anyway."""

from __future__ import annotations

import logging
import time

import pytest
from testapp import jobs as tj

from cogworker_django.core import unread
from cogworker_django.store import keys


@pytest.fixture(autouse=True)
def _judge_afresh():
    unread.forget()
    yield
    unread.forget()


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if "no live worker reads it" in r.getMessage()]


def test_a_mistyped_queue_is_warned_once_with_did_you_mean(r, caplog, configure):
    configure(QUEUES=["default", "critical"])
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        jid = tj.record.using(queue="defualt").enqueue("a")
        tj.record.using(queue="defualt").enqueue("b")  # the same name: not again
        tj.record.using(queue="critcal").enqueue_many([("c",)])
    assert jid and r.llen(keys.queue("defualt")) == 2  # pushed all the same
    (first, second) = _warnings(caplog)
    assert "queue 'defualt' is in no QUEUES setting" in first
    assert "did you mean 'default'?" in first and "-q defualt" in first
    assert "queue 'critcal'" in second and "did you mean 'critical'?" in second


def test_queues_that_a_setting_or_a_live_worker_reads_are_not_warned(r, caplog, configure):
    configure(QUEUES=["default"])
    r.zadd(keys.live_queues(), {"reports": time.time()})  # a worker started with -q reports
    r.zadd(keys.live_queues(), {"old": time.time() - 3600})  # one that read it long ago
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        tj.record.enqueue("a")
        tj.record.using(queue="reports").enqueue("b")
        tj.record.using(queue="low").enqueue("c")  # a TASKS backend's queue (test settings)
        tj.record.using(queue="old").enqueue("d")
    (only,) = _warnings(caplog)
    assert "queue 'old'" in only and "did you mean" not in only


def test_the_warning_never_fails_a_push(r, caplog, configure, monkeypatch):
    """Its read of the live queues failing says nothing and pushes the job."""
    configure(QUEUES=["default"])

    def broken():
        raise ConnectionError("Redis is away for the listing read")

    monkeypatch.setattr(unread, "configured", broken)
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        assert tj.record.using(queue="elsewhere").enqueue("a")
    assert _warnings(caplog) == []
    assert r.llen(keys.queue("elsewhere")) == 1
