"""The JSON payload: encoding, decoding that never raises, the retry option."""

import json

import pytest

from cogworker_django import payload


def test_build_has_every_field():
    job = payload.build("a.b", (1, "x"), {"k": [1]}, queue="low", retry=3)
    assert set(job) >= {
        "jid",
        "func",
        "args",
        "kwargs",
        "queue",
        "retry",
        "retry_count",
        "created_at",
        "enqueued_at",
    }
    assert job["args"] == [1, "x"] and job["kwargs"] == {"k": [1]} and job["retry_count"] == 0
    assert json.loads(payload.encode(job)) == job


def test_unserialisable_positional_argument_is_named():
    job = payload.build("app.jobs.f", (1, object()), {})
    with pytest.raises(TypeError, match=r"app.jobs.f: positional argument 1 \(object\)"):
        payload.encode(job)


def test_unserialisable_keyword_argument_is_named():
    job = payload.build("app.jobs.f", (), {"when": {1, 2}})
    with pytest.raises(TypeError, match="keyword argument 'when' \\(set\\)"):
        payload.encode(job)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1,2]",
        b'{"no": "func"}',
        b"\xff\xfe\x00",
        b'{"jid": "x", "func": "f", "args": "nope"}',
        "",
        b"null",
    ],
)
def test_decode_never_raises_and_keeps_raw_bytes(raw):
    job = payload.decode(raw, "default")
    assert job["func"] == payload.UNPARSEABLE
    assert job["queue"] == "default" and job["retry"] is False
    assert isinstance(job["raw_payload"], str)
    assert job["error_class"] and job["error_message"]
    json.loads(payload.encode(job))  # the wrapper itself is always storable


def test_raw_payload_is_capped():
    job = payload.decode(b"x" * (payload.RAW_PAYLOAD_LIMIT + 50))
    assert len(job["raw_payload"]) == payload.RAW_PAYLOAD_LIMIT


def test_large_integers_survive():
    big = 2**63 + 12345
    job = payload.build("f", (big,), {})
    assert payload.decode(payload.encode(job))["args"] == [big]


@pytest.mark.parametrize(
    "value,count",
    [
        (True, 25),
        (None, 25),
        (False, 0),
        (0, 0),
        (5, 5),
        (2.9, 2),
        ("7", 7),
        (" 3 ", 3),
        ("lots", 0),
        ({"a": 1}, 0),
        ([3], 0),
        (-4, 0),
        (float("nan"), 0),
        (float("inf"), 0),
    ],
)
def test_retry_option_parsing_never_crashes(value, count):
    assert payload.max_retries(value) == count


def test_retries_exhausted():
    assert not payload.retries_exhausted({"retry": 2, "retry_count": 2})
    assert payload.retries_exhausted({"retry": 2, "retry_count": 3})
    assert payload.retries_exhausted({"retry": False, "retry_count": 1})
    assert payload.retries_exhausted({"retry": {"x": 1}, "retry_count": 1})
    assert not payload.retries_exhausted({"retry": True, "retry_count": "garbage"})


class BadStr(Exception):
    def __str__(self):
        raise RuntimeError("boom")


def test_error_text_is_built_without_raising():
    try:
        raise BadStr()
    except BadStr as exc:
        assert "BadStr" in payload.error_message(exc)
        assert payload.error_class(exc).endswith("BadStr")
        assert "BadStr" in payload.traceback_text(exc)
    assert payload.error_class(ValueError()) == "ValueError"
