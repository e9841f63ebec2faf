"""UUID, Decimal, datetime, date, time, timedelta and model instances as job arguments,
through real Redis and a real (in-process) worker: each reaches the job as itself, on a
plain and on an async job; a model row is read when the job runs; a row gone by then
sends the run to dead without a retry; payloads written before tags existed run as they
did. The tagged form itself: tests/core/test_argcodec.py."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from zoneinfo import ZoneInfo

import pytest
from testapp.jobs import (
    argument_jobs as aj,
)  # (through the job module: registered as a worker would)
from testapp.models import Article, Ticket

from cogworker_django import testing
from cogworker_django.store import keys

from ..api_support import make_job, push
from ..helpers import wait_until

PARIS = ZoneInfo("Europe/Paris")

db = pytest.mark.django_db(transaction=True)


def values() -> tuple[list, dict]:
    """One of each type, alone and nested, positional and keyword."""
    args = [
        uuid.UUID("7c9e6679-7425-40de-944b-e07fc1f90ae7"),
        decimal.Decimal("12.50"),
        decimal.Decimal("-1E+3"),
        dt.datetime(2025, 3, 30, 1, 30, 0, 250, tzinfo=PARIS),  # aware: a zone
        dt.datetime(2025, 7, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
        dt.datetime(2025, 7, 1, 12, 0, 0, 7),  # naive
        dt.date(1999, 12, 31),
        dt.time(23, 59, 58, 999999),
        dt.time(8, 0, tzinfo=dt.timezone(dt.timedelta(hours=9))),
        dt.timedelta(days=-2, seconds=3, microseconds=4),
        [1, "x", None, {"at": dt.date(2024, 2, 29), "ids": [uuid.UUID(int=1), uuid.UUID(int=2)]}],
        {"__cw__": "uuid", "v": "not a tag: a user's dict", "inner": {"__cw__": 1}},
    ]
    kwargs = {
        "amount": decimal.Decimal("0.10"),
        "when": dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
        "plain": {"__cw__": ["kept", "as", "is"]},
    }
    return args, kwargs


def assert_same(got, expected) -> None:
    """Equal, of the same types all the way down, datetimes with the same offset (or
    both naive)."""
    assert type(got) is type(expected), (got, expected)
    if isinstance(expected, dict):
        assert list(got) == list(expected)
        for k in expected:
            assert_same(got[k], expected[k])
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert_same(a, b)
    else:
        assert got == expected
        if isinstance(expected, (dt.datetime, dt.time)):
            assert got.utcoffset() == expected.utcoffset()
            assert (got.tzinfo is None) == (expected.tzinfo is None)
        if isinstance(expected, decimal.Decimal):
            assert str(got) == str(expected)  # digits and exponent kept


def dead(r) -> list[dict]:
    return [json.loads(m) for m in r.zrange(keys.dead(keys.home_of("default")), 0, -1)]


def retries(r) -> int:
    return r.zcard(keys.retry(keys.home_of("default")))


@pytest.fixture(autouse=True)
def _forget():
    aj.received.clear()
    yield
    aj.received.clear()


@db
@pytest.mark.parametrize("function", [aj.keep, aj.akeep], ids=["sync", "async"])
def test_every_type_reaches_the_job_as_itself(function, inworker, r):
    article = Article.objects.create(title="first")
    ticket = Ticket.objects.create(note="uuid pk")
    args, kwargs = values()
    args += [article, [ticket]]
    jid = function.enqueue("all", *args, **kwargs)
    # In Redis: JSON, tagged, marked.
    (raw,) = r.lrange(keys.queue("default"), 0, -1)
    payload = json.loads(raw)
    assert payload["jid"] == jid and payload["tagged"] is True
    assert payload["args"][1] == {"__cw__": "uuid", "v": "7c9e6679-7425-40de-944b-e07fc1f90ae7"}
    assert payload["args"][-2] == {"__cw__": "model", "v": ["testapp.Article", article.pk]}
    assert payload["args"][-1] == [
        {"__cw__": "model", "v": ["testapp.Ticket", {"__cw__": "uuid", "v": str(ticket.pk)}]}
    ]
    inworker()
    got_args, got_kwargs = wait_until(lambda: aj.received.get("all"), 15, message="the run")
    assert_same(got_kwargs, kwargs)
    assert_same(list(got_args[:-2]), args[:-2])
    got_article, (got_ticket,) = got_args[-2:]
    assert type(got_article) is Article and got_article.pk == article.pk
    assert got_article is not article and got_article.title == "first"
    assert type(got_ticket) is Ticket and got_ticket.pk == ticket.pk
    assert isinstance(got_ticket.pk, uuid.UUID)
    assert dead(r) == [] and retries(r) == 0


@db
@pytest.mark.parametrize("function", [aj.keep_title, aj.akeep_title], ids=["sync", "async"])
def test_a_row_changed_after_the_enqueue_is_read_fresh_by_the_run(function, inworker, r):
    article = Article.objects.create(title="as enqueued")
    function.enqueue("fresh", article)
    Article.objects.filter(pk=article.pk).update(title="as changed since")
    inworker()
    got = wait_until(lambda: aj.received.get("fresh"), 15, message="the run")
    assert got == (("as changed since",), {"pk": article.pk})


@db
@pytest.mark.parametrize("function", [aj.keep, aj.akeep], ids=["sync", "async"])
def test_a_row_deleted_before_the_run_goes_to_dead_without_a_retry(function, inworker, r):
    ticket = Ticket.objects.create(note="soon gone")
    function.enqueue("gone", 1, note=ticket)
    pk = ticket.pk
    ticket.delete()
    inworker()
    (entry,) = wait_until(lambda: dead(r), 15, message="in dead")
    assert entry["error_class"] == "cogworker_django.core.argcodec.ArgumentGone"
    assert (
        f"testapp.Ticket with pk UUID('{pk}') (keyword argument 'note') no longer exists"
        in (entry["error_message"])
    )
    assert entry["retry_count"] == 1 and retries(r) == 0
    assert "gone" not in aj.received  # the job never ran


@db
def test_an_unsaved_instance_is_refused_at_enqueue_naming_the_argument(r):
    with pytest.raises(TypeError, match=r"keyword argument 'article' \(Article\) is an unsaved"):
        aj.keep.enqueue("x", article=Article(title="not saved"))
    # A UUID pk is set before the save: unsaved all the same.
    with pytest.raises(TypeError, match=r"positional argument 1 \(list\) holds at \[0\] a value"):
        aj.keep.enqueue("x", [Ticket(note="not saved")])
    with pytest.raises(TypeError, match="unsaved testapp.Ticket"):
        aj.keep.enqueue_many([("y", Ticket())])
    assert r.llen(keys.queue("default")) == 0


def test_anything_else_is_still_refused_naming_the_argument(r):
    with pytest.raises(TypeError, match=r"positional argument 1 \(set\) is not JSON-serialisable"):
        aj.keep.enqueue("x", {1, 2})
    with pytest.raises(TypeError, match=r"keyword argument 'k' \(list\) .* a bytes \(at \[1\]\)"):
        aj.keep.enqueue("x", uuid.uuid4(), k=[1, b"raw"])
    with pytest.raises(TypeError, match=r"positional argument 1 \(time\) is a time whose zone"):
        aj.keep.enqueue("x", dt.time(9, tzinfo=PARIS))  # no offset without a date
    assert r.llen(keys.queue("default")) == 0


def test_plain_arguments_are_written_as_before_with_no_mark(r):
    aj.keep.enqueue("plain", 1, {"__cw__": "uuid", "v": "a user's dict"}, name="x")
    (raw,) = r.lrange(keys.queue("default"), 0, -1)
    payload = json.loads(raw)
    assert "tagged" not in payload
    assert payload["args"] == ["plain", 1, {"__cw__": "uuid", "v": "a user's dict"}]


@pytest.mark.parametrize("function", ["keep", "akeep"])
def test_a_payload_of_the_previous_release_runs_unchanged(function, inworker, r):
    # Written as a release before tags wrote it (no "tagged" field): a dict that looks like
    # a tag is a user's dict, and reaches the job as it is.
    look_alike = {"__cw__": "uuid", "v": "7c9e6679-7425-40de-944b-e07fc1f90ae7"}
    raw = (
        '{"jid":"0123456789abcdef01234567","func":"testapp.argument_jobs.FUNC",'
        '"args":["old",1,{"__cw__":"uuid","v":"7c9e6679-7425-40de-944b-e07fc1f90ae7"}],'
        '"kwargs":{"when":"2025-01-01"},"queue":"default","retry":true,"retry_count":0,'
        '"created_at":1700000000.5,"enqueued_at":1700000000.5}'.replace("FUNC", function)
    )
    r.lpush(keys.queue("default"), raw)
    r.sadd(keys.queues(), "default")
    inworker()
    got = wait_until(lambda: aj.received.get("old"), 15, message="the run")
    assert got == ((1, look_alike), {"when": "2025-01-01"})
    assert dead(r) == []


def test_a_tagged_value_that_cannot_be_read_goes_to_dead_without_a_retry(inworker, r):
    job = make_job("testapp.argument_jobs.keep", "bad", {"__cw__": "uuid", "v": "no"}, tagged=True)
    unknown = make_job(
        "testapp.argument_jobs.keep", "new", {"__cw__": "money", "v": "1 EUR"}, tagged=True
    )
    push(r, job)
    push(r, unknown)
    inworker()
    entries = wait_until(lambda: len(dead(r)) == 2 and dead(r), 15, message="in dead")
    messages = sorted(e["error_message"] for e in entries)
    assert all(e["error_class"] == "cogworker_django.core.jobs.BadArguments" for e in entries)
    assert "positional argument 1: the tagged value" in messages[0]
    assert "can't be read" in messages[0] or "can't be read" in messages[1]
    assert any("unknown type 'money'" in m for m in messages)
    assert retries(r) == 0 and aj.received == {}


@db
@pytest.mark.parametrize("mode", ["fake", "inline"])
@pytest.mark.parametrize("function", [aj.keep, aj.akeep], ids=["sync", "async"])
def test_the_test_modes_pass_the_same_values(mode, function):
    article = Article.objects.create(title="before")
    args, kwargs = values()
    if mode == "fake":
        with testing.fake():
            function.enqueue("t", article, *args, **kwargs)
            (recorded,) = function.jobs
            assert recorded["tagged"] is True
            Article.objects.filter(pk=article.pk).update(title="after")
            function.drain()
    else:
        with testing.inline():
            function.enqueue("t", article, *args, **kwargs)
    got_args, got_kwargs = aj.received["t"]
    assert_same(list(got_args[1:]), args)
    assert_same(got_kwargs, kwargs)
    assert got_args[0].pk == article.pk
    assert got_args[0].title == ("after" if mode == "fake" else "before")
    if mode == "fake":
        Article.objects.all().delete()
        with testing.fake():
            function.enqueue("gone", Article.objects.create(title="x"))
            Article.objects.all().delete()
            with pytest.raises(Exception, match=r"testapp.Article with pk \d+ .*no longer exists"):
                function.drain()


def test_unique_jobs_digest_a_uuid_as_the_payload_holds_it(r):
    ident = uuid.uuid4()
    variant = aj.keep.using(unique="until_executed")
    assert variant.enqueue("u", ident) is not None
    assert variant.enqueue("u", uuid.UUID(str(ident))) is None  # the same UUID: a duplicate
    assert variant.enqueue("u", uuid.uuid4()) is not None
    assert r.llen(keys.queue("default")) == 2


@db
def test_signatures_carry_tagged_arguments(inworker, r):
    from cogworker_django import chain

    ticket = Ticket.objects.create(note="in a chain")
    # The second step gets the first's return value first ("chained": its token), then
    # its own arguments, tagged in the chain's spec.
    chain(aj.echo.s("chained"), aj.keep.s(ticket, when=dt.date(2025, 5, 1))).enqueue()
    inworker()
    (got_ticket,), kwargs = wait_until(lambda: aj.received.get("chained"), 15, message="steps")
    assert isinstance(got_ticket, Ticket) and got_ticket.pk == ticket.pk
    assert kwargs == {"when": dt.date(2025, 5, 1)}
    assert dead(r) == []


@db
@pytest.mark.parametrize(
    "how",
    ["enqueue_many", "enqueue_in", "on_commit", "durable"],
)
def test_every_way_of_enqueueing_carries_the_tags(how, inworker, r):
    from django.db import transaction

    ticket = Ticket.objects.create(note=how)
    ident = uuid.UUID(int=7)
    if how == "enqueue_many":
        aj.keep.enqueue_many([("plain", 1), ("tagged", ident, ticket)])
    elif how == "enqueue_in":
        aj.keep.enqueue_in(0.2, "tagged", ident, ticket)
    else:
        with transaction.atomic():
            aj.keep.using(**{how: True}).enqueue("tagged", ident, ticket)
            assert r.llen(keys.queue("default")) == 0  # not before the commit
    inworker()
    got_ident, got_ticket = wait_until(lambda: aj.received.get("tagged"), 15, message="run")[0]
    assert got_ident == ident and type(got_ident) is uuid.UUID
    assert type(got_ticket) is Ticket and got_ticket.note == how
    if how == "enqueue_many":
        assert wait_until(lambda: aj.received.get("plain"), 15, message="plain") == ((1,), {})
