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
