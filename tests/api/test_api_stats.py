"""api.Stats: counters in total and per UTC day, and the dashboard overview."""

import datetime as dt
import time

import pytest

from cogworker_django.api import Stats
from cogworker_django.store import keys

from ..api_support import add_to, make_job, push

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]


def test_totals_and_daily(r):
    today = dt.datetime.now(dt.UTC).date()
    r.set(keys.stat("processed"), 12)
    r.set(keys.stat("failed"), 3)
    r.set(keys.stat("processed", today.isoformat()), 5)
    r.set(keys.stat("failed", (today - dt.timedelta(days=2)).isoformat()), 2)
    r.set(keys.stat("processed", (today - dt.timedelta(days=40)).isoformat()), 99)
    s = Stats()
    assert (s.processed, s.failed) == (12, 3)
    days = s.daily(30)
    assert len(days) == 30 and days[-1].date == today and days[0].date == today - dt.timedelta(29)
    assert days[-1].processed == 5 and days[-3].failed == 2
    assert sum(d.processed for d in days) == 5


def test_garbage_counters_read_as_zero(r):
    r.set(keys.stat("processed"), "not a number")
    assert Stats().processed == 0


def test_overview(r):
    r.set(keys.stat("processed"), 7)
    push(r, make_job(queue="a"))
    push(r, make_job(queue="b"))
    add_to(r, "schedule", make_job(), time.time() + 10)
    add_to(r, "retry", make_job())
    add_to(r, "dead", make_job())
    add_to(r, "dead", make_job())
    o = Stats().overview()
    assert o.processed == 7 and o.failed == 0 and o.processed_today == 0
    assert (o.scheduled, o.retries, o.dead, o.enqueued) == (1, 1, 2, 2)
    # (with a home per queue add_to lists the queue of the jobs it files, as a push would)
    assert [q.name for q in o.queues] == ["a", "b", *(["default"] if keys.spread() else [])]
    assert o.processes == [] and o.busy == 0 and len(o.days) == 30
