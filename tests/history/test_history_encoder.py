"""The run record encoder (history.dumps) writes exactly what the JSON encoder it stands
for writes: api/history.py matches fields by that text."""

from __future__ import annotations

import json

import pytest

from cogworker_django import history

REFERENCE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@pytest.mark.parametrize(
    "value",
    [
        "jid",
        'é "quoted" \\ \u2028 \x00',
        None,
        1.0,
        10**30,
        float("nan"),
        float("-inf"),
        [],
        {},
        {"jid": "j", "duration": 1e-7, "error_class": None, "ok": True, "n": [1, 2.5, "x"]},
    ],
)
def test_dumps_is_the_reference_encoding(value):
    assert history.dumps(value) == REFERENCE(value)


def test_a_recorded_run_encodes_as_before():
    job = {"jid": "j1", "func": "testapp.jobs.noop", "enqueued_at": 10.0, "periodic": "p"}
    run = history.capture(job, "default", 12.5, 0.25, ValueError("bad ünicode"))
    record = history.as_dict(run, "host:1")
    assert history.dumps(record) == REFERENCE(record)
    assert json.loads(history.dumps(record))["error_message"] == "bad ünicode"


RUNS = [
    ("j1", "app.jobs.f", "default", "success", 12.5, 0.25, None, None, None, 0.5),
    (
        "j2",
        "app.jobs.f",
        "çà",
        "failed",
        1765000000.123456,
        1e-7,
        "ValueError",
        'é "quoted" \\ \u2028 \x00 \n line two',
        "nightly",
        None,
    ),
    (None, None, "q", "timeout", -0.0, 3.0, "JobTimeout", "", None, 0.0),
    ("j3", "app.jobs.f", "default", "success", 1.5, 0.1, None, None, None),  # no wait field
    # Fields of other types than the recorder writes: encoded by dumps, as before.
    (7, "app.jobs.f", "default", "success", 1.5, 0.1, None, None, None, None),
    ("j4", "app.jobs.f", "default", "success", 15, 0.1, None, None, None, None),
    ("j5", "app.jobs.f", "default", "success", 1.5, float("nan"), None, None, None, None),
    ("j6", "app.jobs.f", "default", True, 1.5, 0.1, None, None, None, float("inf")),
]


@pytest.mark.parametrize("run", RUNS)
def test_a_records_text_is_the_encoders_text_of_its_dict(run):
    """The flusher writes each record from the run's fields (history.record_text): the
    same text, byte for byte, as encoding the record's dict, whatever the fields hold."""
    for worker in ("host:1", 'wéird "host"'):
        text = history.record_text(run, worker)
        assert text == history.dumps(history.as_dict(run, worker))
        assert "\n" not in text  # one record a line in the script's argument
