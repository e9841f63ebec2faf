"""Settings: defaults, lazy reading (override_settings works), clear errors naming the key."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from cogworker_django import conf


def test_defaults_of_api_md():
    s = conf._validate({})
    assert s.REDIS_URL == "redis://127.0.0.1:6379/0"
    assert s.PREFIX == "cogworker"
    assert s.CONCURRENCY == 10
    assert s.FETCH == "reliable"
    assert s.SHUTDOWN_TIMEOUT == 25
    assert s.ORPHAN_THRESHOLD == 300
    assert s.MAX_ORPHANINGS == 3
    assert s.FETCH_IDLE_MAX_INTERVAL == 1.0
    assert s.UNIQUE_LOCK_TTL == 86400
    assert s.PERIODIC_CATCH_UP is False
    assert s.DEAD_MAX_JOBS == 10000
    assert s.DEAD_TIMEOUT == 180 * 86400
    assert s.HISTORY_MAX_RUNS == 100000
    assert s.RESULT_TTL == 86400
    assert s.ENQUEUE_ON_COMMIT is False
    assert s.MIDDLEWARE == {"client": [], "server": []}
    assert s.TESTING is None


def test_read_lazily_so_override_settings_works(prefix):
    assert conf.get().PREFIX == prefix
    with override_settings(COGWORKER={"PREFIX": "other", "CONCURRENCY": 3}):
        assert conf.get().PREFIX == "other"
        assert conf.get().CONCURRENCY == 3
    assert conf.get().PREFIX == prefix


def test_queue_weights_and_repetition():
    s = conf._validate({"QUEUES": ["critical:3", "default:2", "low", "low"]})
    assert [(q.name, q.weight) for q in s.QUEUES] == [("critical", 3), ("default", 2), ("low", 2)]
    assert s.queue_names == ["critical", "default", "low"]


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("CONCURRENCY", 0, "must be > 0"),
        ("CONCURRENCY", "10", "expected an integer"),
        ("CONCURRENCY", True, "expected an integer"),
        ("FETCH", "fast", "reliable, basic"),
        ("QUEUES", "default", "non-empty list"),
        ("QUEUES", ["a:x"], "weight"),
        ("QUEUES", ["a:0"], "weight"),
        ("QUEUES", [], "non-empty list"),
        ("PREFIX", "", "non-empty string"),
        ("PREFIX", "a b", "whitespace"),
        ("REDIS_URL", "localhost", "URL"),
        ("SHUTDOWN_TIMEOUT", -1, ">= 0"),
        ("ORPHAN_THRESHOLD", 0, "> 0"),
        ("MAX_ORPHANINGS", 1.5, "integer"),
        ("DEAD_MAX_JOBS", -1, ">= 0"),
        ("ENQUEUE_ON_COMMIT", "yes", "True or False"),
        ("MIDDLEWARE", {"client": "x"}, "dotted paths"),
        ("TESTING", "mock", '"fake" or "inline"'),
        ("SENTINELS", ["host"], "pairs"),
        ("REDIS_OPTIONS", [], "dict"),
    ],
)
def test_bad_value_names_key_value_and_what_is_allowed(key, value, fragment):
    with pytest.raises(ImproperlyConfigured) as info:
        conf._validate({key: value})
    message = str(info.value)
    assert key in message
    # the value itself, or for a list the offending element
    named = [repr(value)] + ([repr(v) for v in value] if isinstance(value, list) else [])
    assert any(n in message for n in named)
    assert fragment in message


def test_sentinels_need_a_master_name():
    with pytest.raises(ImproperlyConfigured, match="SENTINEL_MASTER"):
        conf._validate({"SENTINELS": [("127.0.0.1", 26379)]})


def test_unknown_key_is_named():
    with pytest.raises(ImproperlyConfigured, match="'CONCURENCY'"):
        conf._validate({"CONCURENCY": 5})


def test_not_a_dict():
    with pytest.raises(ImproperlyConfigured, match="must be a dict"):
        conf._validate(["x"])


def test_bad_settings_fail_at_startup_via_get():
    with override_settings(COGWORKER={"CONCURRENCY": -2}):
        with pytest.raises(ImproperlyConfigured, match="CONCURRENCY"):
            conf.get()


def test_periodic_must_be_a_dict():
    with override_settings(COGWORKER_PERIODIC=["x"]):
        with pytest.raises(ImproperlyConfigured, match="COGWORKER_PERIODIC"):
            conf.periodic_raw()
