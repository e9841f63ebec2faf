"""The tagged JSON form of argument values (core/argcodec.py): the exact text of each type
(docs/jobs.md "What an argument may be" shows the same, for other languages' clients),
round trips, the escape of a user's dict holding the tag key, ``dumps``/``loads`` for
kept results, and the errors. Through real workers: tests/core/test_argument_types.py."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import json
import re
import uuid
from zoneinfo import ZoneInfo

import pytest
from testapp.models import Article, Ticket

from cogworker_django.core import argcodec, payload

db = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "value, text",
    [
        (
            uuid.UUID("7c9e6679-7425-40de-944b-e07fc1f90ae7"),
            '{"__cw__":"uuid","v":"7c9e6679-7425-40de-944b-e07fc1f90ae7"}',
        ),
        (decimal.Decimal("12.50"), '{"__cw__":"decimal","v":"12.50"}'),
        (decimal.Decimal("1E+3"), '{"__cw__":"decimal","v":"1E+3"}'),
        (
            dt.datetime(2025, 3, 30, 1, 30, tzinfo=ZoneInfo("Europe/Paris")),
            '{"__cw__":"datetime","v":"2025-03-30T01:30:00+01:00"}',
        ),
        (
            dt.datetime(2025, 3, 30, 14, 5, 0, 250000),
            '{"__cw__":"datetime","v":"2025-03-30T14:05:00.250000"}',
        ),
        (dt.date(2025, 3, 30), '{"__cw__":"date","v":"2025-03-30"}'),
        (dt.time(14, 5, 0, 250000), '{"__cw__":"time","v":"14:05:00.250000"}'),
        (
            dt.time(14, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            '{"__cw__":"time","v":"14:05:00+02:00"}',
        ),
        (dt.timedelta(days=1, hours=2, microseconds=3), '{"__cw__":"timedelta","v":[1,7200,3]}'),
        (dt.timedelta(seconds=-1), '{"__cw__":"timedelta","v":[-1,86399,0]}'),
        ({"__cw__": "x", "n": 1}, '{"__cw__":"dict","v":{"__cw__":"x","n":1}}'),
    ],
)
def test_each_type_has_the_documented_form_and_comes_back_as_itself(value, text):
    assert argcodec.dumps(value) == text
    back = argcodec.loads(text)
    assert back == value and type(back) is type(value)
    if isinstance(value, (dt.datetime, dt.time)):
        assert back.utcoffset() == value.utcoffset()


def test_an_aware_datetime_keeps_its_offset_and_a_naive_one_stays_naive():
    paris = dt.datetime(2025, 7, 14, 22, 0, tzinfo=ZoneInfo("Europe/Paris"))
    back = argcodec.loads(argcodec.dumps(paris))
    assert back == paris and back.utcoffset() == dt.timedelta(hours=2)
    assert back.tzinfo == dt.timezone(dt.timedelta(hours=2))  # the offset, not the zone name
    naive = dt.datetime(2025, 7, 14, 22, 0)
    back = argcodec.loads(argcodec.dumps(naive))
    assert back == naive and back.tzinfo is None


def test_subclasses_come_back_as_the_standard_type():
    class Stamp(dt.datetime):
        pass

    back = argcodec.loads(argcodec.dumps(Stamp(2025, 1, 1, tzinfo=dt.UTC)))
    assert type(back) is dt.datetime and back == dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    # A datetime is a date: it is written as a datetime, never cut to its date.
    assert argcodec.dumps([dt.datetime(2025, 1, 1)]) == (
        '[{"__cw__":"datetime","v":"2025-01-01T00:00:00"}]'
    )


def test_plain_json_is_written_as_json_and_handed_back_itself():
    value = {"a": [1, 2.5, None, True, "é"], "b": {"c": []}}
    assert argcodec.dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert argcodec.to_json(value) == (value, False)
    assert argcodec.to_json(value)[0] is value  # not copied, not walked
    assert argcodec.loads(argcodec.dumps(value)) == value


def test_a_users_dict_holding_the_tag_key_is_escaped_wherever_it_sits():
    value = [
        {"__cw__": "uuid", "v": "7c9e6679-7425-40de-944b-e07fc1f90ae7"},
        {"deep": [{"__cw__": {"__cw__": "date", "v": "2025-01-01"}}]},
        uuid.UUID(int=5),
    ]
    text = argcodec.dumps(value)
    assert text.startswith('[{"__cw__":"dict","v":{"__cw__":"uuid","v":"7c9e')
    assert argcodec.loads(text) == value
    # Alone, with nothing else tagged, too.
    assert argcodec.loads(argcodec.dumps(value[:2])) == value[:2]
    as_json, tagged = argcodec.to_json(value[:2])
    assert tagged and argcodec.restore(as_json) == value[:2]
    # A key that merely ends like the tag, or the tag's text inside a string, is no tag.
    quirky = {'x"__cw__': 1, "s": '"__cw__":', "__cw__x": 2}
    assert argcodec.loads(argcodec.dumps(quirky)) == quirky


def test_a_payload_holding_a_users_tag_key_dict_with_a_tag_round_trips():
    job, text = payload.build_encoded(
        "app.jobs.f", ({"__cw__": 1}, uuid.UUID(int=1)), {"k": {"__cw__": "uuid", "v": "x"}}
    )
    stored = json.loads(text)
    assert stored["tagged"] is True
    assert argcodec.restore_arguments(stored["args"], stored["kwargs"]) == (
        [{"__cw__": 1}, uuid.UUID(int=1)],
        {"k": {"__cw__": "uuid", "v": "x"}},
    )


def test_a_payload_is_marked_only_when_a_tag_was_written():
    _, plain = payload.build_encoded("app.jobs.f", (1, {"__cw__": 1}), {})
    assert "tagged" not in json.loads(plain)
    job, tagged = payload.build_encoded("app.jobs.f", (dt.date(2025, 1, 1),), {})
    assert json.loads(tagged)["tagged"] is True and job["tagged"] is True
    assert job["args"] == [{"__cw__": "date", "v": "2025-01-01"}]  # the job holds JSON data


@pytest.mark.parametrize(
    "value, why",
    [
        ({1, 2}, r"^the value \(set\) is not JSON-serialisable$"),
        ([1, {"a": b"x"}], r"holds a bytes \(at \[1\]\['a'\]\)"),
        (float("nan"), r"is nan, which JSON can't hold"),
        ({"a": [float("inf")]}, r"holds inf \(at \['a'\]\[0\]\)"),
        ({1: "a"}, r"has the key 1 \(int\); JSON keys are strings"),
        (dt.time(9, tzinfo=ZoneInfo("Europe/Paris")), "no fixed offset without a date"),
    ],
)
def test_dumps_names_what_cannot_be_kept(value, why):
    with pytest.raises(TypeError, match=why):
        argcodec.dumps(value)


def test_a_circular_value_is_refused_not_walked_forever():
    loop: list = [uuid.uuid4()]
    loop.append(loop)
    with pytest.raises(TypeError, match="holds itself"):
        argcodec.dumps(loop)
    with pytest.raises(TypeError, match=r"positional argument 0 \(list\) holds itself"):
        payload.build("app.jobs.f", (loop,), {})


@pytest.mark.parametrize(
    "tagged, why",
    [
        ({"__cw__": "uuid", "v": "nope"}, "can't be read"),
        ({"__cw__": "decimal", "v": 1.5}, "can't be read"),
        ({"__cw__": "timedelta", "v": [1, 2]}, "can't be read"),
        ({"__cw__": "timedelta", "v": [1, 2, 3.5]}, "can't be read"),
        ({"__cw__": "datetime"}, "can't be read"),
        ({"__cw__": "model", "v": ["nowhere.Thing", 1]}, "'nowhere.Thing' is not installed"),
        ({"__cw__": "money", "v": "1 EUR"}, "unknown type 'money'"),
    ],
)
def test_a_tagged_value_that_cannot_be_read_says_why(tagged, why):
    with pytest.raises(argcodec.BadTag, match=why):
        argcodec.restore_arguments([1, tagged], {})
    with pytest.raises(argcodec.BadTag, match="positional argument 1: "):
        argcodec.restore_arguments([1, tagged], {})


@db
def test_a_model_instance_passes_by_reference_and_is_loaded_fresh():
    article = Article.objects.create(title="one")
    ticket = Ticket.objects.create(note="two")
    text = argcodec.dumps({"a": article, "t": ticket})
    assert text == (
        f'{{"a":{{"__cw__":"model","v":["testapp.Article",{article.pk}]}},'
        f'"t":{{"__cw__":"model","v":["testapp.Ticket",{{"__cw__":"uuid","v":"{ticket.pk}"}}]}}}}'
    )
    Article.objects.filter(pk=article.pk).update(title="changed")
    back = argcodec.loads(text)
    assert back["a"].title == "changed" and back["t"].pk == ticket.pk
    ticket.delete()
    with pytest.raises(argcodec.ArgumentGone, match=r"testapp.Ticket with pk UUID\("):
        argcodec.loads(text)
    with pytest.raises(TypeError, match="unsaved testapp.Article"):
        argcodec.dumps(Article(title="new"))


@db
def test_aloads_and_arestore_read_models_off_the_loop():
    article = Article.objects.create(title="async")
    text = argcodec.dumps([article, uuid.UUID(int=3)])
    seen: list = []

    async def main():
        # A query on the loop's own thread raises SynchronousOnlyOperation: these don't.
        seen.append(await argcodec.aloads(text))
        seen.append(await argcodec.arestore_arguments(json.loads(text), {}))

    asyncio.run(main())
    (loaded, ident), ((again, _), kwargs) = seen
    assert loaded.title == "async" and again.pk == article.pk and ident == uuid.UUID(int=3)
    assert kwargs == {}


def test_loads_reads_bytes_and_plain_json():
    assert argcodec.loads(b'{"__cw__":"date","v":"2025-01-02"}') == dt.date(2025, 1, 2)
    assert argcodec.loads(b"[1,2]") == [1, 2]
    # A dict shaped like a tag in JSON that has none of the tag text: read as it is.
    assert argcodec.loads('{"v": 1}') == {"v": 1}


def _documented_forms() -> list[str]:
    """The JSON of each row of docs/jobs.md's table of tagged forms."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "jobs.md").read_text()
    section = text.split("### The tagged form", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"^\|[^|]*\| `(\{\"__cw__\".*?\})`", section, re.MULTILINE)


def test_the_documented_forms_are_what_is_written():
    forms = _documented_forms()
    assert len(forms) == 10
    for text in forms:
        value = json.loads(text)
        if value["__cw__"] == "model":  # (its models are the docs' own)
            label, pk = value["v"]
            assert re.fullmatch(r"\w+\.[A-Z]\w+", label)
            continue
        assert argcodec.dumps(argcodec.loads(text)) == text, text
