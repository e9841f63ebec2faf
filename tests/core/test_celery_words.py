"""Celery's names for an enqueue (core/celery_words.py): ``delay`` is ``enqueue``;
``apply_async(args, kwargs, countdown=, eta=, queue=, expires=)`` is ``enqueue_in`` /
``enqueue_at`` / ``using(queue=, expires_in=)``, on job functions and ``using()``
variants alike; a Celery option with no counterpart is refused saying what to use."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from testapp import jobs as tj

from cogworker_django.store import keys

from ..helpers import wait_until


def queued(r, queue="default") -> list[dict]:
    return [json.loads(m) for m in r.lrange(keys.queue(queue), 0, -1)]


def scheduled(r) -> list[tuple[dict, float]]:
    home = keys.home_of("default")
    return [(json.loads(m), s) for m, s in r.zrange(keys.schedule(home), 0, -1, withscores=True)]


def test_delay_is_enqueue(r):
    jid = tj.record.delay("d")
    (job,) = queued(r)
    assert job["jid"] == jid and job["args"] == ["d"] and job["kwargs"] == {}
    jid = tj.record.delay(token="k")
    assert queued(r)[0]["kwargs"] == {"token": "k"} and queued(r)[0]["jid"] == jid


def test_apply_async_takes_args_and_kwargs_as_celery_does(r):
    jid = tj.takes_anything.apply_async((1, "a"), {"x": [2]})
    (job,) = queued(r)
    assert (job["jid"], job["args"], job["kwargs"]) == (jid, [1, "a"], {"x": [2]})
    tj.record.apply_async()
    tj.record.apply_async(["list"])
    tj.record.apply_async(kwargs={"token": "only"})
    assert [(j["args"], j["kwargs"]) for j in queued(r)[::-1][1:]] == [
        ([], {}),
        (["list"], {}),
        ([], {"token": "only"}),
    ]


def test_countdown_is_enqueue_in(r):
    before = time.time()
    jid = tj.record.apply_async(("later",), countdown=120)
    after = time.time()
    ((job, score),) = scheduled(r)
    assert job["jid"] == jid and before + 120 <= score <= after + 120
    assert queued(r) == []


def test_eta_is_enqueue_at(r):
    eta = dt.datetime(2031, 5, 1, 8, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    jid = tj.record.apply_async(("at",), eta=eta)
    ((job, score),) = scheduled(r)
    assert job["jid"] == jid and score == eta.timestamp()


def test_queue_is_a_using_variant(r):
    jid = tj.record.apply_async(("q",), queue="low")
    assert queued(r, "low")[0]["jid"] == jid and queued(r) == []


def test_expires_counts_from_now_as_celery_counts_it(r):
    before = time.time()
    tj.record.apply_async(("e",), expires=60)
    tj.record.apply_async(("ce",), countdown=20, expires=60)
    after = time.time()
    (job,) = queued(r)
    assert before + 60 <= job["expires_at"] <= after + 60
    # Scheduled 20 s ahead, expiring 60 s from now: 40 s after it may first run.
    ((later, _),) = scheduled(r)
    assert before + 60 <= later["expires_at"] <= after + 60
    until = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    tj.record.apply_async(("dt",), expires=until)
    assert abs(queued(r)[0]["expires_at"] - until.timestamp()) < 1e-3


def test_using_variants_have_both(r):
    variant = tj.record.using(queue="low", retry=3)
    jid = variant.delay("v")
    other = variant.apply_async(("w",), countdown=0)
    jobs = {j["jid"]: j for j in queued(r, "low")}
    assert set(jobs) == {jid, other}
    assert all(j["retry"] == 3 for j in jobs.values())
    # apply_async's queue wins over the variant's.
    assert variant.apply_async(("x",), queue="critical") == queued(r, "critical")[0]["jid"]


def test_a_unique_duplicate_returns_none_as_enqueue_does(r):
    variant = tj.record.using(unique="until_executed")
    assert variant.delay("u") is not None
    assert variant.apply_async(("u",)) is None


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"countdown": 5, "eta": dt.datetime(2031, 1, 1, tzinfo=dt.UTC)}, ValueError, "give one"),
        ({"eta": dt.datetime(2031, 1, 1)}, ValueError, "eta must be timezone-aware"),
        ({"eta": 1_900_000_000}, TypeError, "eta must be an aware datetime"),
        ({"countdown": "5"}, TypeError, "countdown must be a number of seconds"),
        ({"countdown": float("nan")}, ValueError, "countdown = nan is not a finite"),
        ({"expires": 10, "countdown": 30}, ValueError, "comes before the job may run"),
        ({"expires": dt.datetime(2020, 1, 1, tzinfo=dt.UTC)}, ValueError, "comes before"),
        ({"expires": 0}, ValueError, "comes before"),
        ({"priority": 9}, TypeError, r"Celery's 'priority' is not taken here; use a queue"),
        ({"link": None}, TypeError, r"'link' is not taken here; use chain\("),
        ({"routing_key": "x"}, TypeError, "use queue="),
        ({"serializer": "pickle"}, TypeError, "payloads are always JSON"),
        ({"soft_time_limit": 5}, TypeError, r"use using\(timeout=seconds\)"),
        ({"countdwn": 5}, TypeError, r"'countdwn' is not an option of apply_async"),
    ],
)
def test_options_we_do_not_take_or_that_contradict_are_refused(options, error, message, r):
    with pytest.raises(error, match=message) as caught:
        tj.record.apply_async(("x",), **options)
    assert "testapp.jobs.record.apply_async()" in str(caught.value)
    assert queued(r) == [] and scheduled(r) == []


def test_args_and_kwargs_of_the_wrong_kind_are_refused(r):
    with pytest.raises(TypeError, match="args must be a list or tuple, got 'abc'"):
        tj.record.apply_async("abc")
    with pytest.raises(TypeError, match=r"kwargs must be a dict, got \['token'\]"):
        tj.record.apply_async((), ["token"])
    with pytest.raises(TypeError, match="does not take these arguments"):
        tj.record.apply_async((1, 2, 3))
    assert queued(r) == []


def test_they_run_in_a_worker(inworker, r, prefix):
    tj.record.delay("by-delay")
    tj.record.apply_async(kwargs={"token": "by-apply-async"}, countdown=0.3)
    inworker()
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 2, 15, message="both runs")
    assert r.hgetall(f"{prefix}:test:runs") == {"by-delay": "1", "by-apply-async": "1"}
