"""METRICS_PORT, METRICS_TOKEN and OTEL: validated like the other settings, with clear
errors naming the key (the token's value is never shown)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from cogworker_django import conf


def test_defaults():
    s = conf._validate({})
    assert (s.METRICS_PORT, s.METRICS_TOKEN, s.OTEL) == (None, None, False)


def test_good_values():
    s = conf._validate({"METRICS_PORT": 9808, "METRICS_TOKEN": "t0ken", "OTEL": True})
    assert (s.METRICS_PORT, s.METRICS_TOKEN, s.OTEL) == (9808, "t0ken", True)


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        ("METRICS_PORT", 0, "TCP port number from 1 to 65535"),
        ("METRICS_PORT", 65536, "TCP port number from 1 to 65535"),
        ("METRICS_PORT", "9808", "TCP port number"),
        ("METRICS_PORT", True, "TCP port number"),
        ("METRICS_TOKEN", "", "non-empty string without whitespace"),
        ("METRICS_TOKEN", "two words", "non-empty string without whitespace"),
        ("METRICS_TOKEN", 1234, "non-empty string"),
        ("OTEL", "yes", "expected True or False"),
    ],
)
def test_bad_values_name_the_key(key, value, fragment):
    with pytest.raises(ImproperlyConfigured) as err:
        conf._validate({key: value})
    assert f"COGWORKER[{key!r}]" in str(err.value) and fragment in str(err.value)


def test_a_bad_token_is_not_shown():
    with pytest.raises(ImproperlyConfigured) as err:
        conf._validate({"METRICS_TOKEN": "secret value"})
    assert "secret" not in str(err.value)


def test_otel_without_the_package(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("opentelemetry") else real(name, *a),
    )
    with pytest.raises(ImproperlyConfigured, match=r"cogworker-django\[otel\]"):
        conf._validate({"OTEL": True})
