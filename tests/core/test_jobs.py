"""@job and its enqueue methods, the registry, pushing (one round trip each), client
middleware, and on_commit."""

import datetime as dt
import json
import logging
import time

import pytest
import redis
from django.db import transaction
from testapp import jobs as tj

from cogworker_django import call
from cogworker_django.core import client, jobs, middleware, payload
from cogworker_django.store import keys, listing

from ..helpers import free_port

# Pushing is the same on a Redis Cluster: every test runs on both (tests/cluster_support.py).
pytestmark = pytest.mark.cluster


@pytest.fixture
def round_trips(monkeypatch):
    """Counts commands-or-pipelines written to Redis (each is one round trip)."""
    counter = {"n": 0}
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        counter["n"] += 1
        return original(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    return counter


def queued(r, queue="default"):
    return [json.loads(x) for x in r.lrange(keys.queue(queue), 0, -1)]


def test_job_is_registered_by_dotted_path():
    assert jobs.registered("testapp.jobs.record") is tj.record
    assert tj.record.path == "testapp.jobs.record"


def test_plain_call_runs_inline(r, prefix):
    tj.record("inline-token")
    assert r.hget(f"{prefix}:test:runs", "inline-token") == "1"
    assert r.llen(keys.queue("default")) == 0


def test_enqueue_pushes_a_json_payload(r):
    jid = tj.takes_anything.enqueue("a", token=None)
    [job] = queued(r)
    assert job["jid"] == jid and job["func"] == "testapp.jobs.takes_anything"
    assert job["args"] == ["a"] and job["kwargs"] == {"token": None}
    assert job["queue"] == "default" and job["retry"] is True and job["retry_count"] == 0
    assert job["enqueued_at"] >= job["created_at"]
    assert r.smembers(keys.queues()) == {"default"}


def test_single_enqueue_is_one_round_trip(r, round_trips):
    tj.record.enqueue("warm")  # first push also lists the queue (same pipeline)
    round_trips["n"] = 0
    for i in range(10):
        tj.record.enqueue(str(i))
    assert round_trips["n"] == 10


def test_enqueue_many_is_one_round_trip_for_any_count(r, round_trips):
    tj.record.enqueue("warm")
    # The first push to a queue no setting names costs one read, once per process (is a
    # worker reading it? core/unread.py): made here, before the count.
    tj.record.using(queue="bulk").enqueue("warm")
    round_trips["n"] = 0
    jids = tj.record.using(queue="bulk").enqueue_many([(str(i),) for i in range(5000)])
    assert round_trips["n"] == 1
    assert len(jids) == 5000 and len(set(jids)) == 5000
    assert r.llen(keys.queue("bulk")) == 5001


def test_enqueue_many_item_shapes(r):
    tj.slow.enqueue_many([(1,), {"seconds": 2}, call(3, token="t"), 4])
    args = sorted((j["args"], j["kwargs"]) for j in queued(r))
    assert ([], {"seconds": 2}) in args and ([1], {}) in args
    assert ([3], {"token": "t"}) in args and ([4], {}) in args


def test_a_bulk_enqueue_writes_each_job_as_a_single_enqueue_would(r):
    """The plain bulk path (no dict per job) writes the fields, order and encoding of a
    single enqueue, in the order given."""
    single = tj.takes_anything.using(queue="bulk").enqueue("s", token="é")
    jids = tj.takes_anything.using(queue="bulk").enqueue_many(
        [("a",), {"token": "é"}, call("b", token=None), ()]
    )
    texts = r.lrange(keys.queue("bulk"), 0, -1)[::-1]  # LPUSH: oldest last
    jobs_ = [json.loads(t) for t in texts]
    assert [j["jid"] for j in jobs_] == [single, *jids]
    assert [(j["args"], j["kwargs"]) for j in jobs_[1:]] == [
        (["a"], {}),
        ([], {"token": "é"}),
        (["b"], {"token": None}),
        ([], {}),
    ]
    assert all(list(j) == list(jobs_[0]) for j in jobs_)  # the same fields, in order
    for text, job in zip(texts, jobs_, strict=True):
        assert text == json.dumps(job, separators=(",", ":"), ensure_ascii=False)
    assert len({j["created_at"] for j in jobs_[1:]}) == 1  # one enqueue time per call
    assert all(j["queue"] == "bulk" and j["retry"] is True for j in jobs_)
    assert "bulk" in r.smembers(keys.queues())


@pytest.mark.parametrize(
    "options, field, value",
    [
        ({"retry": False}, "retry", False),
        ({"retry": 3}, "retry", 3),
        ({"timeout": 7}, "timeout", 7),
        ({"expires_in": 60}, "expires_at", None),
        ({"limits": ["bulk-api"]}, "limits", ["bulk-api"]),
    ],
)
def test_a_bulk_enqueue_keeps_every_option(configure, r, options, field, value):
    configure(LIMITS={"bulk-api": {"concurrency": 2}})
    tj.record.using(**options).enqueue_many([("a",), ("b",)])
    jobs_ = queued(r)
    assert len(jobs_) == 2
    for job in jobs_:
        assert field in job and (value is None or job[field] == value)


@pytest.fixture
def plain_pushes(monkeypatch):
    """Counts the bulk pushes that took the plain path (client.push_plain)."""
    calls = []
    original = client.push_plain

    def spy(queue, jids, texts):
        calls.append(len(texts))
        return original(queue, jids, texts)

    monkeypatch.setattr(client, "push_plain", spy)
    return calls


def test_a_plain_bulk_enqueue_takes_the_plain_path(r, plain_pushes):
    assert all(tj.record.enqueue_many([("a",), ("b",)]))
    assert plain_pushes == [2]


@pytest.mark.parametrize(
    "options, settings",
    [
        ({"retry": 3}, {}),
        ({"timeout": 5}, {}),
        ({"unique": "until_executed"}, {}),
        ({}, {"MIDDLEWARE": {"client": ["tests.core.test_jobs.AddTag"], "server": []}}),
        ({}, {"OTEL": True}),
    ],
)
def test_a_bulk_enqueue_with_more_to_do_takes_the_general_path(
    configure, r, plain_pushes, options, settings
):
    if settings:
        configure(**settings)
    assert all(tj.record.using(**options).enqueue_many([("a",), ("b",)]))
    assert plain_pushes == [] and len(queued(r)) == 2


def test_a_bulk_enqueue_while_redis_is_away_raises_and_is_not_retried(configure, plain_pushes):
    """Redis unreachable: the plain path's pipeline raises the connection error to the
    caller (a push is never retried by itself: rule 1), as the general path does."""
    configure(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(redis.ConnectionError):
        tj.record.enqueue_many([("a",), ("b",)])
    assert plain_pushes == [2]  # it was the plain path that raised


def test_a_query_dict_item_is_written_as_a_single_enqueue_writes_it(r):
    from django.http import QueryDict

    form = QueryDict("tag=a&tag=b&page=2")
    tj.takes_anything.enqueue(**form)  # (a single enqueue copies the mapping too)
    tj.takes_anything.enqueue_many([form])
    single, bulk = (json.loads(t)["kwargs"] for t in r.lrange(keys.queue("default"), 0, -1)[::-1])
    assert single == bulk == {"tag": ["a", "b"], "page": ["2"]}


def test_a_bulk_enqueue_raises_the_first_bad_items_error(r):
    with pytest.raises(TypeError, match=r"positional argument 0 \(object\)"):
        tj.record.enqueue_many([(object(),), jobs.Call((1, {}))])
    assert r.llen(keys.queue("default")) == 0


def test_a_bulk_enqueue_to_a_queue_of_the_wrong_type_says_none_went_through(r):
    r.set(keys.queue("broken"), "not a list")
    with pytest.raises(client.BulkPushError, match="2 of 2 jobs were not pushed") as info:
        tj.record.using(queue="broken").enqueue_many([("a",), ("b",)])
    assert info.value.results == [None, None]
    assert tj.record.enqueue_many([]) == []


def test_using_changes_queue_and_retry(r):
    tj.record.using(queue="critical", retry=False).enqueue("x")
    [job] = queued(r, "critical")
    assert job["retry"] is False


def test_enqueue_in_and_at_go_to_the_schedule(r):
    before = time.time()
    tj.record.enqueue_in(300, "later")
    tj.record.enqueue_in(dt.timedelta(minutes=10), "later2")
    when = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    tj.record.enqueue_at(when, "at")
    tj.record.enqueue_at(when.timestamp() + 1, "epoch")
    scored = r.zrange(keys.schedule(keys.home_of("default")), 0, -1, withscores=True)
    scores = sorted(s for _, s in scored)
    assert len(scores) == 4
    assert before + 299 < scores[0] < before + 302
    assert before + 599 < scores[1] < before + 602
    assert scores[2] == when.timestamp() and scores[3] == when.timestamp() + 1
    assert r.llen(keys.queue("default")) == 0


@pytest.mark.parametrize(
    "call,fragment",
    [
        (
            lambda: tj.record.enqueue_in(float("inf"), "x"),
            "enqueue_in: delay = inf is not a finite",
        ),
        (
            lambda: tj.record.enqueue_in(float("nan"), "x"),
            "enqueue_in: delay = nan is not a finite",
        ),
        (lambda: tj.record.enqueue_at(float("inf"), "x"), "enqueue_at: when = inf is not a finite"),
        (lambda: tj.record.enqueue_at(float("nan"), "x"), "enqueue_at: when = nan is not a finite"),
        (lambda: tj.record.enqueue_at(time.time() * 1000, "x"), "enqueue_at: when = "),
        (lambda: tj.record.enqueue_in(11 * 365 * 86400, "x"), "enqueue_in: delay = "),
        (lambda: tj.record.enqueue_in(dt.timedelta(days=4000), "x"), "enqueue_in: delay = "),
        (
            lambda: tj.record.enqueue_at(dt.datetime(2999, 1, 1, tzinfo=dt.UTC), "x"),
            "enqueue_at: when = datetime",
        ),
    ],
)
def test_times_that_never_come_or_are_not_numbers_are_refused(r, call, fragment):
    with pytest.raises(ValueError) as info:
        call()
    assert fragment in str(info.value)
    if "finite" not in fragment:
        assert "10-year horizon" in str(info.value)
    assert (
        r.zcard(keys.schedule(keys.home_of("default"))) == 0 and r.llen(keys.queue("default")) == 0
    )


def test_times_within_the_horizon_and_in_the_past_are_accepted(r):
    tj.record.enqueue_in(9 * 365 * 86400, "x")
    tj.record.enqueue_in(-5, "runs now")
    tj.record.enqueue_at(0, "runs now too")
    assert (
        r.zcard(keys.schedule(keys.home_of("default"))) == 1 and r.llen(keys.queue("default")) == 2
    )


def test_nan_and_integer_keys_are_refused_at_enqueue(r):
    with pytest.raises(ValueError, match="positional argument 0 is nan"):
        tj.record.enqueue(float("nan"))
    with pytest.raises(TypeError, match="keyword argument 'data' has the key 1"):
        tj.takes_anything.enqueue(data={1: "x"})
    with pytest.raises(TypeError, match="has the key 1"):
        tj.record.enqueue_many([({1: "x"},)])
    assert r.llen(keys.queue("default")) == 0


def test_an_oversized_payload_is_refused_at_enqueue_naming_the_job(configure, r):
    configure(MAX_PAYLOAD_BYTES=10_000)
    with pytest.raises(ValueError, match=r"testapp.jobs.record: the payload is 20,\d{3} bytes"):
        tj.record.enqueue("x" * 20_000)
    with pytest.raises(ValueError, match="MAX_PAYLOAD_BYTES"):
        tj.record.using(on_commit=True).enqueue("x" * 20_000)
    assert r.llen(keys.queue("default")) == 0
    tj.record.enqueue("x" * 9_000)
    assert r.llen(keys.queue("default")) == 1


def test_enqueue_at_refuses_a_naive_datetime():
    with pytest.raises(ValueError, match="timezone-aware"):
        tj.record.enqueue_at(dt.datetime(2030, 1, 1), "x")


def test_unserialisable_argument_raises_type_error_naming_it(r):
    with pytest.raises(TypeError, match="positional argument 0 \\(set\\)"):
        tj.record.enqueue({1, 2})
    with pytest.raises(TypeError, match="keyword argument 'token'"):
        tj.record.enqueue(token=object())
    with pytest.raises(TypeError):
        tj.record.enqueue_many([("ok",), (object(),)])
    assert r.llen(keys.queue("default")) == 0  # nothing was pushed, not even the good one


@pytest.mark.parametrize(
    "options,fragment",
    [
        ({"queue": ""}, "queue"),
        ({"queue": "a b"}, "queue"),
        ({"retry": "x"}, "retry"),
        ({"retry": -1}, "retry"),
        ({"unique": "always"}, "unique"),
        ({"unique_for": 0}, "unique_for"),
        ({"on_commit": "yes"}, "on_commit"),
        ({"priority": 1}, "unknown option"),
    ],
)
def test_bad_options_are_refused(options, fragment):
    with pytest.raises((ValueError, TypeError), match=fragment):
        tj.record.using(**options)


def test_decorator_refuses_local_functions():
    def local():
        pass

    with pytest.raises(TypeError, match="module-level"):
        jobs.job(local)


def test_a_wrong_typed_queue_listing_does_not_stop_the_push(r, caplog):
    caplog.set_level(logging.ERROR, logger="cogworker_django")
    r.set(keys.queues(), "not a set")
    listing.forget_all()
    jid = tj.record.enqueue("x")
    assert jid and r.llen(keys.queue("default")) == 1
    assert any("not updated" in rec.getMessage() for rec in caplog.records)
    jids = tj.record.enqueue_many([("y",), ("z",)])
    assert all(jids) and r.llen(keys.queue("default")) == 3


def test_a_wrong_typed_queue_raises_and_pushes_nothing(r):
    r.set(keys.queue("default"), "oops")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        tj.record.enqueue("x")


class AddTag(middleware.ClientMiddleware):
    def __call__(self, job, push):
        job["kwargs"]["token"] = "tagged"
        return push(job)


class StopAll(middleware.ClientMiddleware):
    def __call__(self, job, push):
        return None


def test_client_middleware_can_change_the_payload(configure, r):
    configure(MIDDLEWARE={"client": ["tests.core.test_jobs.AddTag"], "server": []})
    tj.record.enqueue()
    assert queued(r)[0]["kwargs"] == {"token": "tagged"}


def test_client_middleware_can_stop_the_push(configure, r):
    configure(MIDDLEWARE={"client": ["tests.core.test_jobs.StopAll"], "server": []})
    assert tj.record.enqueue("x") is None
    assert tj.record.enqueue_many([("a",), ("b",)]) == [None, None]
    assert r.llen(keys.queue("default")) == 0


@pytest.mark.django_db(transaction=True)
def test_on_commit_pushes_after_commit_and_not_on_rollback(r):
    with transaction.atomic():
        jid = tj.record.using(on_commit=True).enqueue("committed")
        assert jid and r.llen(keys.queue("default")) == 0
    assert r.llen(keys.queue("default")) == 1
    with pytest.raises(RuntimeError), transaction.atomic():
        tj.record.using(on_commit=True).enqueue("rolled back")
        raise RuntimeError
    assert r.llen(keys.queue("default")) == 1


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_setting(configure, r):
    configure(ENQUEUE_ON_COMMIT=True)
    with transaction.atomic():
        tj.record.enqueue_many([("a",), ("b",)])
        tj.record.enqueue("c")
        assert r.llen(keys.queue("default")) == 0
    assert r.llen(keys.queue("default")) == 3


def test_current_job_outside_a_job_is_none():
    assert jobs.current_job() is None


def test_a_bulk_push_partly_refused_says_which_jobs_went_through(r):
    """One queue key of the wrong type refuses its jobs; the others are pushed, and the
    error lists which, so a caller retries only the refused ones (rule 1)."""
    r.set(keys.queue("broken"), "not a list")
    good = tj.record.using(queue="fine").enqueue_many([("a",), ("b",)])
    assert all(good)
    jobs_ = [
        payload.build("testapp.jobs.record", (t,), {}, queue=q)
        for t, q in (("1", "fine"), ("2", "broken"), ("3", "fine"))
    ]
    with pytest.raises(client.BulkPushError, match="1 of 3 jobs were not pushed") as info:
        client.push_many(jobs_)
    assert isinstance(info.value, redis.ResponseError)
    assert info.value.results == [jobs_[0]["jid"], None, jobs_[2]["jid"]]
    assert r.llen(keys.queue("fine")) == 4
