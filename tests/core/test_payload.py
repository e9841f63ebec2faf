"""The JSON payload: encoding, decoding that never raises, the retry option."""

import json

import pytest

from cogworker_django.core import payload, tracebacks


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
    with pytest.raises(TypeError, match=r"app.jobs.f: positional argument 1 \(object\)"):
        payload.build("app.jobs.f", (1, object()), {})


def test_unserialisable_keyword_argument_is_named():
    with pytest.raises(TypeError, match="keyword argument 'when' \\(set\\)"):
        payload.build("app.jobs.f", (), {"when": {1, 2}})


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused_naming_the_argument(number):
    with pytest.raises(ValueError, match=r"app.jobs.f: positional argument 1 \(at \[0\]\['x'\]\)"):
        payload.build("app.jobs.f", (1, [{"x": number}]), {})
    with pytest.raises(ValueError, match="keyword argument 'ratio' is"):
        payload.build("app.jobs.f", (), {"ratio": number})


def test_non_string_dict_keys_are_refused_naming_the_argument():
    with pytest.raises(TypeError, match=r"positional argument 0 has the key 1 \(int\).*'1'"):
        payload.build("app.jobs.f", ({1: "a"},), {})
    with pytest.raises(TypeError, match=r"keyword argument 'rows' \(at \[2\]\) has the key None"):
        payload.build("app.jobs.f", (), {"rows": [{}, {"a": 1}, {None: 2}]})
    with pytest.raises(TypeError, match="keyword argument names must be strings"):
        payload.build("app.jobs.f", (), {3: "x"})


def test_plain_nested_data_is_accepted():
    value = {"a": [1, 2.5, {"b": [True, None, "x"]}], "c": ({"d": -0.0},)}
    job = payload.build("app.jobs.f", (value,), {"k": value})
    assert json.loads(payload.encode(job))["args"][0]["a"][2] == {"b": [True, None, "x"]}


def test_arguments_that_hold_themselves_are_refused_not_walked_forever():
    loop: list = []
    loop.append(loop)
    nested: dict = {"rows": []}
    nested["rows"].append({"parent": nested})
    with pytest.raises(TypeError, match=r"positional argument 0 \(list\) holds itself"):
        payload.build("app.jobs.f", (loop,), {})
    with pytest.raises(TypeError, match=r"keyword argument 'tree' \(dict\) holds itself"):
        payload.build("app.jobs.f", (), {"tree": nested})
    payload.check_arguments("app.jobs.f", [loop], {"tree": nested})  # (encode refuses it)
    # A container shared (not circular) is plain data, written out twice.
    shared = [1, 2]
    job = payload.build("app.jobs.f", (shared, {"again": shared}), {})
    assert json.loads(payload.encode(job))["args"] == [[1, 2], {"again": [1, 2]}]


@pytest.mark.parametrize(
    "args, kwargs, fields",
    [
        ((), {}, {}),
        ((1, "x", None, True, 2.5, 10**30), {}, {}),
        (('é "quoted" \\ \u2028 \x00 \U0001f600',), {"k": [1, {"n": None}]}, {}),
        (([{"a": [1, 2, {"b": "c"}]}],), {"deep": {"x": -0.0, "y": 1e-7}}, {}),
        ((), {}, {"retry": False}),
        ((), {}, {"retry": 3}),
        ((), {}, {"queue": "çà-queue", "jid": 'a"b\\c'}),
        (("x",), {}, {"timeout": 5, "limits": ["api"]}),
    ],
)
def test_the_text_built_is_the_reference_encoding_of_the_job(args, kwargs, fields):
    """Every job's text is what json.dumps writes for it (compact, non-ASCII kept), byte
    for byte, whichever way it was made (a plain job's fixed parts are written directly)."""
    opts = {k: fields[k] for k in ("queue", "retry", "jid") if k in fields}
    extra = {k: v for k, v in fields.items() if k not in opts}
    job, text = payload.build_encoded("app.jobs.f", args, kwargs, **opts, **extra)
    assert text == json.dumps(job, separators=(",", ":"), ensure_ascii=False)
    assert json.loads(text) == job


BULK_CASES = [
    ((), {}),
    ((1, "x", None, True, 2.5, 10**30), {}),
    (['é "quoted" \\ \u2028 \x00 \U0001f600'], {"k": [1, {"n": None}]}),
    (([{"a": [1, 2, {"b": "c"}]}],), {"deep": {"x": -0.0, "y": 1e-7}}),
    ((), {"only": "keywords"}),
    (([1, 2], ([3],)), {}),  # tuples inside, written as lists
]


@pytest.mark.parametrize("queue", ["default", "çà-queue"])
@pytest.mark.parametrize("retry", [True, False])
def test_bulk_texts_are_the_single_builders_texts_byte_for_byte(queue, retry):
    """A bulk enqueue's texts (built once per call, not per job) are what build_encoded
    makes of each job, for any arguments, queue and retry."""
    now = 1765000000.123456
    jids = payload.new_jids(len(BULK_CASES))
    texts = payload.plain_texts("app.jobs.f", BULK_CASES, jids, queue=queue, retry=retry, now=now)
    for (args, kwargs), jid, text in zip(BULK_CASES, jids, texts, strict=True):
        job, single = payload.build_encoded(
            "app.jobs.f", args, kwargs, queue=queue, retry=retry, jid=jid, now=now
        )
        assert text == single
        assert json.loads(text)["jid"] == job["jid"] == jid


def test_bulk_texts_with_a_whole_number_time_are_the_single_builders_too():
    [text] = payload.plain_texts(
        "app.jobs.f", [((1,), {})], ["a" * 24], queue="q", retry=True, now=1765000000
    )
    single = payload.build_encoded("app.jobs.f", (1,), {}, queue="q", jid="a" * 24, now=1765000000)[
        1
    ]
    assert text == single and '"created_at":1765000000,' in text


def test_bulk_texts_of_a_query_dict_and_around_the_size_check_are_the_single_builders(
    configure,
):
    """A dict subclass that reads differently through items() (a QueryDict) is copied as
    build_encoded copies it; texts either side of the quarter of MAX_PAYLOAD_BYTES (kept
    as written, or handed to build_encoded) are the same too."""
    from django.http import QueryDict

    configure(MAX_PAYLOAD_BYTES=1000)  # texts up to 250 characters are kept as written
    calls = [((), QueryDict("tag=a&tag=b")), (("x" * 60,), {}), (("x" * 100,), {})]
    jids = payload.new_jids(3)
    texts = payload.plain_texts("app.jobs.f", calls, jids, queue="q", retry=True, now=1.5)
    assert len(texts[1]) < 250 < len(texts[2])
    for (args, kwargs), jid, text in zip(calls, jids, texts, strict=True):
        single = payload.build_encoded("app.jobs.f", args, kwargs, queue="q", jid=jid, now=1.5)
        assert text == single[1]
    assert json.loads(texts[0])["kwargs"] == {"tag": ["a", "b"]}


def _loop():
    value: list = []
    value.append(value)
    return value


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((1, object()), {}),
        ((), {"when": {1, 2}}),
        ((1, [{"x": float("nan")}]), {}),
        ((), {"ratio": float("inf")}),
        (({1: "a"},), {}),
        ((), {3: "x"}),
        ((_loop(),), {}),
    ],
)
def test_bulk_texts_refuse_what_a_single_build_refuses_with_its_words(args, kwargs):
    good = ((), {})
    with pytest.raises((TypeError, ValueError)) as single:
        payload.build_encoded("app.jobs.f", args, kwargs, jid="b" * 24, now=1.5)
    with pytest.raises(type(single.value)) as bulk:
        payload.plain_texts(
            "app.jobs.f",
            [good, (args, kwargs)],
            ["a" * 24, "b" * 24],
            queue="default",
            retry=True,
            now=1.5,
        )
    assert str(bulk.value) == str(single.value)


def test_bulk_texts_over_the_limit_are_refused_and_near_it_kept(configure):
    configure(MAX_PAYLOAD_BYTES=1000)
    calls = [(("x" * 700,), {}), (("€" * 280,), {})]  # 700 and 840 bytes of arguments
    texts = payload.plain_texts(
        "app.jobs.f", calls, ["a" * 24, "b" * 24], queue="default", retry=True, now=1.5
    )
    assert [json.loads(t)["args"] for t in texts] == [["x" * 700], ["€" * 280]]
    with pytest.raises(payload.PayloadTooLarge, match=r"app.jobs.f: the payload is 1,"):
        payload.plain_texts(
            "app.jobs.f", [(("€" * 400,), {})], ["a" * 24], queue="default", retry=True, now=1.5
        )


def test_jids_made_in_bulk_are_like_single_ones_and_distinct():
    jids = payload.new_jids(1000)
    assert len(jids) == len(set(jids)) == 1000
    assert all(len(j) == len(payload.new_jid()) == 24 and int(j, 16) >= 0 for j in jids)
    assert payload.new_jids(0) == []


def test_the_text_built_is_the_text_pushed_and_checked_once():
    job, text = payload.build_encoded("app.jobs.f", (1,), {"k": "é"}, queue="low")
    assert text == payload.encode(job) and json.loads(text) == job


def test_a_payload_over_the_limit_is_refused_naming_the_job_and_the_size(configure):
    configure(MAX_PAYLOAD_BYTES=1000)
    payload.build("app.jobs.f", ("x" * 700,), {})
    with pytest.raises(payload.PayloadTooLarge) as info:
        payload.build("app.jobs.f", ("x" * 1000,), {})
    message = str(info.value)
    assert message.startswith("app.jobs.f: the payload is 1,")
    assert "bytes" in message and "MAX_PAYLOAD_BYTES'] = 1,000" in message
    assert isinstance(info.value, ValueError) and info.value.size > 1000
    # Bytes, not characters: 400 three-byte characters are 1,200 bytes.
    with pytest.raises(payload.PayloadTooLarge):
        payload.build("app.jobs.f", ("€" * 400,), {})


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
        assert "BadStr" in tracebacks.traceback_text(exc)
    assert payload.error_class(ValueError()) == "ValueError"
