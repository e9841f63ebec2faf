"""codec: raw payloads round-trip byte for byte, and ``number`` reads a finite number
from anything without raising (the failure paths that read hooks' answers and payload
fields rely on it)."""

from __future__ import annotations

import decimal

import pytest

from cogworker_django.store import codec


def test_raw_payload_bytes_round_trip():
    raw = b'{"a": "\xff\xfe"}'
    assert codec.wire(codec.raw_text(raw)) == raw
    assert codec.shown(b"\xff") == "\\xff"


@pytest.mark.parametrize(
    "value, expected",
    [(1, 1.0), (2.5, 2.5), ("3", 3.0), (b"4.5", 4.5), (decimal.Decimal("1.5"), 1.5), (-2, -2.0)],
)
def test_number_reads_finite_numbers(value, expected):
    assert codec.number(value) == expected


@pytest.mark.parametrize(
    "value",
    [None, True, False, "soon", b"\xff", [3], {}, float("nan"), float("inf"), "-inf", "1e400"],
)
def test_number_is_none_for_anything_else(value):
    assert codec.number(value) is None
