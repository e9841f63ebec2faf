"""Every number the package takes from its user is finite and in its documented range,
judged by one table (conf.NUMBERS): the settings, a limiter's fields, the job options
and limit()'s wait. NaN passes every `<=` comparison, so each is tried with it."""

import math
import re
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from cogworker_django import conf, limit

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = [key for key in conf.NUMBERS if key.isupper()]
NOT_FINITE = [math.nan, math.inf, -math.inf, 1e308]


@pytest.mark.parametrize("value", NOT_FINITE, ids=repr)
@pytest.mark.parametrize("key", SETTINGS)
def test_every_number_setting_refuses_nan_inf_and_huge(key, value):
    with pytest.raises(ImproperlyConfigured) as info:
        conf._validate({key: value})
    message = str(info.value)
    assert f"COGWORKER[{key!r}] = {value!r}" in message
    assert any(w in message for w in ("finite", "must be <=", "expected an integer"))


@pytest.mark.parametrize(
    "key",
    [
        "TIMEOUT_GRACE",
        "CANCEL_GRACE",
        "HEARTBEAT_INTERVAL",
        "ORPHAN_THRESHOLD",
        "ORPHAN_CHECK_INTERVAL",
        "POLL_INTERVAL",
        "SHUTDOWN_TIMEOUT",
        "UNIQUE_RESCHEDULE_DELAY",
        "PERIODIC_ACTIVE_TTL",
    ],
)
def test_the_timings_found_passing_nan_are_in_the_table(key):
    assert key in conf.NUMBERS
    with pytest.raises(ImproperlyConfigured, match="finite"):
        conf._validate({key: math.nan})


def test_every_number_setting_has_a_range_and_its_default_is_in_it():
    numeric = {
        k
        for k, v in conf.DEFAULTS.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    assert numeric <= set(conf.NUMBERS)
    for key in SETTINGS:
        assert conf.number_problem(key, conf.DEFAULTS[key] or 1) is None, key
        bound = conf.NUMBERS[key]
        assert conf.number_problem(key, bound.high) is None
        assert conf.number_problem(key, bound.high + 1) == f"must be <= {conf._shown(bound.high)}"


def test_the_ranges_are_documented_as_the_table_says():
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text[text.index("## Numbers") :]
    for name in conf.NUMBERS:
        row = re.search(rf"^\| `{re.escape(name)}` \| ([^|]+) \|", section, re.M)
        assert row, f"{name} is not in the table of numbers"
        assert row.group(1).strip() == conf.allowed(name), name


@pytest.mark.parametrize("value", NOT_FINITE + [0, -1, "5", True], ids=repr)
@pytest.mark.parametrize("field", ["concurrency", "rate", "per"])
def test_limiter_fields_are_finite_and_in_range(field, value):
    spec = {"concurrency": 2} if field == "concurrency" else {"rate": 2, "per": 1}
    spec[field] = value
    with pytest.raises(ImproperlyConfigured) as info:
        conf._validate({"LIMITS": {"api": spec}})
    assert f"['api'][{field!r}] = {value!r}" in str(info.value)


def test_default_timeout_refuses_nan_and_keeps_none():
    assert conf._validate({"DEFAULT_TIMEOUT": None}).DEFAULT_TIMEOUT is None
    for value in NOT_FINITE:
        with pytest.raises(ImproperlyConfigured, match="DEFAULT_TIMEOUT"):
            conf._validate({"DEFAULT_TIMEOUT": value})


@pytest.mark.parametrize("value", NOT_FINITE, ids=repr)
@pytest.mark.parametrize("option", ["timeout", "expires_in", "unique_for"])
def test_job_options_refuse_nan_inf_and_huge(option, value):
    from testapp.jobs import noop

    with pytest.raises(ValueError, match=rf"{option} must be"):
        noop.using(**{option: value})


@pytest.mark.parametrize("wait", ["x", math.nan, math.inf, -1, True, [1]], ids=repr)
def test_limit_wait_is_checked_with_a_message_naming_wait(configure, wait):
    configure(LIMITS={"api": {"concurrency": 1}})
    with pytest.raises(ValueError, match=r"limit\('api'\): wait must be"):
        with limit("api", wait=wait):
            pass
