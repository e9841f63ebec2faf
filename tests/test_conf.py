"""Settings: defaults, lazy reading (override_settings works), clear errors naming the key."""

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

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
    with override_settings(COGWORKER={"PREFIX": "other", "CONCURRENCY": 3, "TEST_PREFIX": False}):
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
        ("REDIS_URL", "http://127.0.0.1:6379/0", "redis://, rediss://, unix://"),
        ("MAX_PAYLOAD_BYTES", 0, "> 0"),
        ("MAX_PAYLOAD_BYTES", 1.5, "integer"),
        ("SHUTDOWN_TIMEOUT", -1, ">= 0"),
        ("ORPHAN_THRESHOLD", 0, "> 0"),
        ("MAX_ORPHANINGS", 1.5, "integer"),
        ("DEAD_MAX_JOBS", -1, ">= 0"),
        ("ENQUEUE_ON_COMMIT", "yes", "True or False"),
        ("MIDDLEWARE", {"client": "x"}, "dotted paths"),
        ("TESTING", "mock", '"inline" or "redis"'),
        ("SENTINELS", ["host"], "pairs"),
        ("REDIS_OPTIONS", [], "dict"),
        ("JOB_MODULES", "shop.emails", "list of dotted module paths"),
        ("JOB_MODULES", ["shop emails"], "list of dotted module paths"),
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


@pytest.mark.parametrize(
    "typo,meant",
    [("CONCURENCY", "CONCURRENCY"), ("QUEUS", "QUEUES"), ("redis_url", "REDIS_URL")],
)
def test_a_misspelt_key_gets_a_suggestion(typo, meant):
    with pytest.raises(ImproperlyConfigured) as info:
        conf._validate({typo: 5})
    assert f"{typo!r} (did you mean {meant!r}?)" in str(info.value)


def test_a_key_like_no_other_gets_no_suggestion():
    with pytest.raises(ImproperlyConfigured) as info:
        conf._validate({"BANANA": 5})
    assert "did you mean" not in str(info.value)


def test_max_payload_bytes_default_is_one_mebibyte():
    assert conf._validate({}).MAX_PAYLOAD_BYTES == 1024 * 1024


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


# Automatic retries and timeouts of the Redis client --------------------------------------


@pytest.mark.parametrize(
    "options,named",
    [
        ({"retry": Retry(ExponentialBackoff(), 3)}, "'retry'"),
        ({"retry": Retry(NoBackoff(), -1)}, "'retry'"),
        ({"retry_on_timeout": True}, "'retry_on_timeout'"),
        ({"retry_on_error": [redis.ConnectionError]}, "'retry_on_error'"),
        ({"socket_timeout": None}, "'socket_timeout'"),
        ({"socket_timeout": 1.0}, "'socket_timeout'"),
        ({"socket_timeout": 0.5}, "'socket_timeout'"),
        ({"socket_timeout": "10"}, "'socket_timeout'"),
        ({"socket_connect_timeout": None}, "'socket_connect_timeout'"),
        ({"socket_connect_timeout": 0}, "'socket_connect_timeout'"),
        ({"connection_pool": redis.ConnectionPool()}, "'connection_pool'"),
    ],
)
def test_redis_options_that_would_retry_or_hang_are_refused(options, named):
    with pytest.raises(ImproperlyConfigured) as info:
        conf._validate({"REDIS_OPTIONS": options})
    message = str(info.value)
    assert f"COGWORKER['REDIS_OPTIONS'][{named}]" in message
    assert "is invalid" in message


def test_refusals_say_why():
    with pytest.raises(ImproperlyConfigured, match=r"Retry with 3 retries.*retries must stay off"):
        conf._validate({"REDIS_OPTIONS": {"retry": Retry(ExponentialBackoff(), 3)}})
    with pytest.raises(ImproperlyConfigured, match=r"hang forever"):
        conf._validate({"REDIS_OPTIONS": {"socket_timeout": None}})
    with pytest.raises(ImproperlyConfigured, match=r"at least 1.5 s.*blocking fetch"):
        conf._validate({"REDIS_OPTIONS": {"socket_timeout": 1.0}})


@pytest.mark.parametrize(
    "options",
    [
        {"retry": Retry(NoBackoff(), 0)},
        {"retry": None},
        {"retry_on_timeout": False},
        {"retry_on_error": []},
        {"socket_timeout": 1.5},
        {"socket_timeout": 30, "socket_connect_timeout": 0.5},
    ],
)
def test_redis_options_that_keep_retries_off_are_accepted(options):
    assert conf._validate({"REDIS_OPTIONS": options}).REDIS_OPTIONS == options


def test_min_socket_timeout_is_longer_than_a_blocking_fetch():
    from cogworker_django.store import connection

    assert conf.min_socket_timeout() > connection.FETCH_BLOCK_SECONDS
    assert connection.DEFAULT_SOCKET_TIMEOUT >= conf.min_socket_timeout()


@pytest.mark.parametrize(
    "query,option",
    [
        ("socket_timeout=0.5", "socket_timeout"),
        ("socket_connect_timeout=0", "socket_connect_timeout"),
        ("retry_on_timeout=true", "retry_on_timeout"),
        ("retry_on_timeout=1", "retry_on_timeout"),
        ("retry_on_error=ConnectionError", "retry_on_error"),
    ],
)
def test_the_same_options_in_the_url_query_are_refused(query, option):
    url = f"redis://:s3cret@127.0.0.1:6379/0?{query}"
    with pytest.raises(ImproperlyConfigured) as info:
        conf._validate({"REDIS_URL": url})
    message = str(info.value)
    assert "COGWORKER['REDIS_URL']" in message and option in message
    assert "s3cret" not in message


def test_harmless_url_query_options_are_accepted():
    url = "redis://127.0.0.1:6379/0?socket_timeout=5&retry_on_timeout=false&client_name=x"
    assert conf._validate({"REDIS_URL": url}).REDIS_URL == url


# RETRY_BACKOFF -----------------------------------------------------------------------------


def test_retry_backoff_resolves_to_the_callable(configure):
    from testapp import jobs as tj

    assert conf.retry_backoff() is None
    configure(RETRY_BACKOFF="testapp.jobs.backoff_2s")
    assert conf.retry_backoff() is tj.backoff_2s


@pytest.mark.parametrize(
    "path,fragment",
    [
        ("testapp.nowhere.backoff", "can't be imported: ModuleNotFoundError"),
        ("testapp.jobs.no_such_function", "can't be imported: ImportError"),
        ("nodots", "can't be imported"),
        ("testapp.jobs.__name__", "is not callable (it is str)"),
        ("testapp.jobs.timeline_key", "can't be called with one argument"),
    ],
)
def test_a_bad_retry_backoff_names_the_setting_and_the_problem(configure, path, fragment):
    configure(RETRY_BACKOFF=path)
    with pytest.raises(ImproperlyConfigured) as info:
        conf.retry_backoff()
    message = str(info.value)
    assert message.startswith(f"COGWORKER['RETRY_BACKOFF'] = {path!r} ")
    assert fragment in message


def test_each_setting_is_declared_once_and_settles_its_default():
    # The declarations (conf.Settings) are the one list: the defaults and the checks
    # are read from them, and every default passes its own check.
    names = [f.name for f in conf.DECLARED]
    assert names == list(conf.DEFAULTS) and "raw" not in names
    settled = conf._validate({})
    assert all(hasattr(settled, n) for n in names)
    assert settled.QUEUES == (conf.QueueSpec("default", 1),)
    assert settled.MIDDLEWARE == {"client": [], "server": []}


@pytest.mark.parametrize("key", [f.name for f in conf.DECLARED])
def test_every_setting_refuses_a_value_of_no_kind_it_takes(key):
    # A value no setting takes (an object) is refused by name, never let through.
    extra = {"SENTINELS": [("h", 26379)]} if key == "SENTINEL_MASTER" else {}
    with pytest.raises(ImproperlyConfigured, match=key):
        conf._validate({**extra, key: object()})
