"""The Redis connection: timeouts always set, one pool per process, rebuilt after fork,
clear errors when Redis is away, passwords masked."""

import sys
import threading
import time

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry
from testapp import jobs as tj

from cogworker_django.store import connection, keys

from ..helpers import MAIN_REDIS_URL, forked_child_gets_its_own_client, free_port


def test_one_client_per_process():
    assert connection.get_client() is connection.get_client()


@pytest.mark.parametrize("options", [{}, {"retry": None}, {"client_name": "x"}])
def test_timeouts_are_always_set_and_retries_off(configure, options):
    configure(REDIS_OPTIONS=options)
    client = connection.get_client()
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] and kwargs["socket_connect_timeout"]
    assert kwargs["socket_timeout"] > connection.FETCH_BLOCK_SECONDS
    assert kwargs["retry"].get_retries() == 0
    assert connection.unsafe_options(client) == []


def test_redis_options_are_passed_to_the_client(configure):
    configure(REDIS_OPTIONS={"socket_timeout": 7.5, "client_name": "cw-test"})
    client = connection.get_client()
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 7.5
    assert client.client_getname() == "cw-test"


def test_rebuilt_after_fork():
    assert forked_child_gets_its_own_client()


def test_stopped_redis_gives_a_clear_error_within_the_timeout(redis_server, configure):
    server = redis_server()
    configure(
        REDIS_URL=server.url, REDIS_OPTIONS={"socket_timeout": 2, "socket_connect_timeout": 1}
    )
    tj.record.enqueue("before")
    server.stop()
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        tj.record.enqueue("during")
    assert time.monotonic() - started < 5


def test_paused_redis_times_out_instead_of_hanging(redis_server, configure):
    server = redis_server()
    configure(
        REDIS_URL=server.url, REDIS_OPTIONS={"socket_timeout": 1.5, "socket_connect_timeout": 1}
    )
    connection.get_client().ping()
    server.client().execute_command("CLIENT", "PAUSE", "4000", "ALL")
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError):
        tj.record.enqueue("paused")
    assert time.monotonic() - started < 3.5


def test_mask_url():
    assert connection.mask_url("redis://:s3cret@h:6379/0") == "redis://:***@h:6379/0"
    assert connection.mask_url("redis://user:s3cret@h/1") == "redis://user:***@h/1"
    assert connection.mask_url("redis://h:6379/0") == "redis://h:6379/0"


def use_cache(settings, location=MAIN_REDIS_URL, **options):
    """A django-redis cache "jobs" with these OPTIONS (its pools are per URL and per process:
    forget them so this test's options apply)."""
    from django_redis.pool import ConnectionFactory

    ConnectionFactory._pools.clear()
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "jobs": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location},
    }
    if options:
        settings.CACHES["jobs"]["OPTIONS"] = options


def test_cache_alias_without_django_redis_names_the_extra(settings, configure, monkeypatch):
    use_cache(settings)
    configure(CACHE_ALIAS="jobs")
    monkeypatch.setitem(sys.modules, "django_redis", None)  # import django_redis fails
    connection.reset()
    with pytest.raises(
        ImproperlyConfigured, match=r"needs django-redis.*cogworker-django\[cache\]"
    ):
        connection.get_client()


def test_cache_alias_uses_the_django_redis_client(settings, configure, prefix, r):
    use_cache(settings)
    configure(CACHE_ALIAS="jobs")
    from django_redis import get_redis_connection

    assert connection.get_client() is get_redis_connection("jobs")
    tj.record.enqueue("via-cache")
    assert r.llen(keys.queue("default")) == 1
    assert connection.describe_target() == "cache alias 'jobs'"


def test_sentinel_target_is_described(configure):
    configure(SENTINELS=[("127.0.0.1", free_port())], SENTINEL_MASTER="mymaster")
    assert connection.describe_target().startswith("sentinel mymaster@127.0.0.1:")


# Clients that would retry, or wait too little or forever, are refused ---------------------


@pytest.mark.parametrize(
    "options,found",
    [
        ({"CONNECTION_POOL_KWARGS": {"retry": Retry(ExponentialBackoff(), 3)}}, "up to 3 time"),
        ({"CONNECTION_POOL_KWARGS": {"retry_on_timeout": True}}, "re-sends a failed command"),
        (
            {"CONNECTION_POOL_KWARGS": {"retry_on_error": [redis.ConnectionError]}},
            "on ConnectionError",
        ),
        ({"CONNECTION_POOL_KWARGS": {"socket_timeout": None}}, "socket_timeout is None"),
        ({"SOCKET_TIMEOUT": 1}, "socket_timeout is 1 s"),
    ],
)
def test_an_unfit_cache_client_is_refused_naming_the_cache(settings, configure, options, found):
    use_cache(settings, **options)
    configure(CACHE_ALIAS="jobs")
    with pytest.raises(ImproperlyConfigured) as info:
        connection.get_client()
    message = str(info.value)
    assert message.startswith("The Redis client of CACHES['jobs'] (COGWORKER['CACHE_ALIAS'])")
    assert found in message
    assert "CACHES['jobs']['OPTIONS']['SOCKET_TIMEOUT']" in message
    with pytest.raises(ImproperlyConfigured):
        tj.record.enqueue("never pushed")


def test_an_unfit_cache_location_query_is_refused(settings, configure):
    use_cache(settings, location=MAIN_REDIS_URL + "?retry_on_timeout=true&socket_timeout=0.2")
    configure(CACHE_ALIAS="jobs")
    with pytest.raises(ImproperlyConfigured, match="socket_timeout is 0.2 s.*re-sends"):
        connection.get_client()


def test_a_fit_cache_client_is_accepted(settings, configure):
    use_cache(
        settings,
        SOCKET_TIMEOUT=10,
        CONNECTION_POOL_KWARGS={"retry": Retry(NoBackoff(), 0), "retry_on_error": []},
    )
    configure(CACHE_ALIAS="jobs")
    assert connection.unsafe_options(connection.get_client()) == []


@pytest.mark.parametrize(
    "backend", ["django.core.cache.backends.locmem.LocMemCache", "no.such.Backend"]
)
def test_a_cache_alias_that_is_not_django_redis_is_a_clear_error(settings, configure, backend):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "jobs": {"BACKEND": backend},
    }
    configure(CACHE_ALIAS="jobs")
    with pytest.raises(ImproperlyConfigured, match=r"COGWORKER\['CACHE_ALIAS'\] = 'jobs'"):
        connection.get_client()


def test_a_missing_cache_alias_is_a_clear_error(configure):
    configure(CACHE_ALIAS="nope")
    with pytest.raises(ImproperlyConfigured, match="django-redis cache in CACHES"):
        connection.get_client()


@pytest.mark.filterwarnings("ignore:Call to .__init__. function with deprecated usage")
def test_unsafe_options_counts_retries_as_redis_py_does():
    """redis-py's own rules: a client made by Redis() retries 10 times by default, one made
    from a URL does not; retry_on_error or retry_on_timeout without a Retry means one
    retry; socket_timeout=None means none at all."""
    made = [
        (redis.Redis(), ["re-sends"]),
        (redis.Redis.from_url(MAIN_REDIS_URL), []),
        (redis.Redis(retry=None, retry_on_error=[redis.ConnectionError]), ["up to 1 time"]),
        (redis.Redis(retry=Retry(NoBackoff(), 0), retry_on_timeout=True), []),
        (redis.Redis(retry=Retry(NoBackoff(), -1)), ["without limit"]),
        (redis.Redis(retry=Retry(NoBackoff(), 0), socket_timeout=None), ["is None"]),
        (redis.Redis.from_url(MAIN_REDIS_URL + "?socket_timeout=1.2"), ["is 1.2 s"]),
    ]
    for client, fragments in made:
        found = " ".join(connection.unsafe_options(client))
        assert bool(found) == bool(fragments), (client, found)
        assert all(f in found for f in fragments), (client, found)


def test_a_client_that_retries_queues_a_job_twice_and_ours_does_not(redis_server, configure):
    """Why retries stay off, on a real server: the server is busy (DEBUG SLEEP) past the
    socket timeout, so an LPUSH times out although Redis will run it. A client that
    retries sends it again: two copies. Ours raises the timeout and pushes one."""
    server = redis_server()
    admin = server.client()

    def busy(seconds: float) -> threading.Thread:
        slow = redis.Redis(port=server.port, socket_timeout=30)
        t = threading.Thread(target=slow.execute_command, args=("DEBUG", "SLEEP", seconds))
        t.start()
        time.sleep(0.3)  # the server is asleep now
        return t

    retrying = redis.Redis(port=server.port, socket_timeout=0.5, retry=Retry(NoBackoff(), 20))
    assert connection.unsafe_options(retrying)
    retrying.ping()
    sleeper = busy(1.5)
    retrying.lpush("q:retrying", "job")  # times out, is sent again, "succeeds"
    sleeper.join()
    assert admin.llen("q:retrying") == 2

    configure(REDIS_URL=server.url, REDIS_OPTIONS={"socket_timeout": 1.5})
    ours = connection.get_client()
    assert connection.unsafe_options(ours) == []
    ours.ping()
    sleeper = busy(2.5)
    with pytest.raises(redis.TimeoutError):
        ours.lpush("q:ours", "job")
    sleeper.join()
    assert admin.llen("q:ours") == 1  # it did run: the caller must not blindly re-send


def test_the_client_built_from_settings_is_checked_too(configure):
    """REDIS_OPTIONS and the URL are refused by the settings; a client built anyway is
    refused at build time (here REDIS_OPTIONS is changed after validation)."""
    configure(REDIS_OPTIONS={})
    from cogworker_django import conf

    conf.get().REDIS_OPTIONS["retry_on_error"] = [redis.ConnectionError]
    conf.get().REDIS_OPTIONS["retry"] = Retry(NoBackoff(), 2)
    connection.reset()
    with pytest.raises(ImproperlyConfigured, match="REDIS_OPTIONS"):
        connection.get_client()
