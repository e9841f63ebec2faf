"""Unique-job digests and options: what makes two enqueues duplicates of each other."""

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from testapp import jobs as tj

from cogworker_django import conf
from cogworker_django.core import unique
from cogworker_django.store import keys

UE = tj.record.using(unique="until_executed")


def test_digest_ignores_kwargs_key_order():
    a = unique.digest("app.f", [1, "x"], {"a": 1, "b": {"y": 2, "x": 1}}, "default")
    b = unique.digest("app.f", [1, "x"], {"b": {"x": 1, "y": 2}, "a": 1}, "default")
    assert a == b


def test_digest_ignores_json_whitespace():
    """A payload that went through Redis (any JSON spacing) digests like the original."""
    args, kwargs = [1, {"k": [1, 2]}], {"lang": "fr", "n": None}
    spaced = (
        json.loads('[ 1 , { "k" : [ 1 ,\n 2 ] } ]'),
        json.loads('{\n  "n": null,\n  "lang":   "fr"\n}'),
    )
    assert unique.digest("app.f", args, kwargs, "q") == unique.digest("app.f", *spaced, "q")


def test_digest_tuples_and_lists_are_the_same_arguments():
    # enqueue(1, 2) gets a tuple, the worker decodes a list: both must digest alike.
    assert unique.digest("f", (1, 2), {}, "q") == unique.digest("f", [1, 2], {}, "q")


@pytest.mark.parametrize(
    "other",
    [
        ("app.g", [1], {"a": 1}, "default"),
        ("app.f", [2], {"a": 1}, "default"),
        ("app.f", [1], {"a": 2}, "default"),
        ("app.f", [1], {"b": 1}, "default"),
        ("app.f", [1], {"a": 1}, "low"),
        ("app.f", [1, None], {"a": 1}, "default"),
    ],
)
def test_digest_changes_with_callable_args_kwargs_and_queue(other):
    assert unique.digest("app.f", [1], {"a": 1}, "default") != unique.digest(*other)


def test_digest_is_a_plain_hex_string():
    d = unique.digest("app.f", [], {}, "default")
    assert len(d) == 64 and int(d, 16) >= 0
    assert keys.unique(d, keys.home_of("default")).endswith(f":unique:{d}")


def test_enqueue_stores_mode_ttl_and_digest_in_the_payload(r):
    jid = tj.takes_anything.using(unique="until_executed").enqueue("tok", token=None)
    job = json.loads(r.lindex(keys.queue("default"), 0))
    assert job["jid"] == jid
    assert job["unique"] == "until_executed"
    assert job["unique_for"] == 86400  # UNIQUE_LOCK_TTL's default
    assert job["unique_digest"] == unique.digest(
        tj.takes_anything.path, ["tok"], {"token": None}, "default"
    )


def test_unique_for_defaults_to_the_setting(r, configure):
    configure(UNIQUE_LOCK_TTL=120)
    UE.enqueue("a")
    assert json.loads(r.lindex(keys.queue("default"), 0))["unique_for"] == 120


def test_fractional_unique_for_rounds_up_never_to_a_day(r):
    """unique_for=0.5 used to become int(0.5) = 0, which the push read as "no TTL given"
    and replaced by a whole day."""
    UE.using(unique_for=0.5).enqueue("a")
    job = json.loads(r.lindex(keys.queue("default"), 0))
    assert job["unique_for"] == 1
    assert 0 < r.ttl(keys.unique(job["unique_digest"], keys.home_of("default"))) <= 1


def test_unique_argument_that_json_cannot_hold_names_the_argument():
    with pytest.raises(TypeError, match="keyword argument 'token'"):
        UE.enqueue(token=object())
    with pytest.raises(TypeError, match="positional argument 0"):
        UE.enqueue({1, 2})


def test_queue_is_part_of_the_digest(r):
    assert UE.enqueue("a") is not None
    assert UE.using(queue="low").enqueue("a") is not None  # another queue: not a duplicate
    assert UE.enqueue("a") is None


@pytest.mark.parametrize("bad", [0, -1, "5", True, None])
def test_unique_reschedule_delay_is_validated(configure, bad):
    configure(UNIQUE_RESCHEDULE_DELAY=bad)
    with pytest.raises(ImproperlyConfigured, match="UNIQUE_RESCHEDULE_DELAY"):
        conf.get()


def test_unique_reschedule_delay_defaults_to_five_seconds():
    assert conf.get().UNIQUE_RESCHEDULE_DELAY == 5.0 == unique.reschedule_delay()


def test_digest_is_computed_on_the_arguments_as_the_payload_holds_them():
    """JSON keys are strings: {1: "a"} travels as {"1": "a"}, so both are one job, and a
    dict mixing int and str keys (unsortable in Python) still has a digest."""
    assert unique.digest("f", [{1: "a"}], {}, "q") == unique.digest("f", [{"1": "a"}], {}, "q")
    assert unique.digest("f", [{1: "a", "b": 2}], {}, "q")
