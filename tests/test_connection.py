"""The Redis connection: timeouts always set, one pool per process, rebuilt after fork,
clear errors when Redis is away, passwords masked."""

import os
import time

import pytest
import redis
from testapp import jobs as tj

from cogworker_django import connection, keys

from .helpers import free_port


def test_one_client_per_process():
    assert connection.get_client() is connection.get_client()


def test_timeouts_are_always_set_and_retries_off(configure):
    configure(REDIS_OPTIONS={"socket_timeout": None})
    kwargs = connection.get_client().connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] and kwargs["socket_connect_timeout"]
    assert kwargs["socket_timeout"] > connection.FETCH_BLOCK_SECONDS
    retry = kwargs.get("retry")
    assert retry is None or retry._retries == 0


def test_redis_options_are_passed_to_the_client(configure):
    configure(REDIS_OPTIONS={"socket_timeout": 7.5, "client_name": "cw-test"})
    client = connection.get_client()
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 7.5
    assert client.client_getname() == "cw-test"


def test_rebuilt_after_fork():
    parent = connection.get_client()
    parent.ping()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            child = connection.get_client()
            ok = child is not parent and child.ping()
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    assert connection.get_client() is parent


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
        REDIS_URL=server.url, REDIS_OPTIONS={"socket_timeout": 1, "socket_connect_timeout": 1}
    )
    connection.get_client().ping()
    server.client().execute_command("CLIENT", "PAUSE", "3000", "ALL")
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError):
        tj.record.enqueue("paused")
    assert time.monotonic() - started < 2.5


def test_mask_url():
    assert connection.mask_url("redis://:s3cret@h:6379/0") == "redis://:***@h:6379/0"
    assert connection.mask_url("redis://user:s3cret@h/1") == "redis://user:***@h/1"
    assert connection.mask_url("redis://h:6379/0") == "redis://h:6379/0"


def test_cache_alias_uses_the_django_redis_client(settings, configure, prefix, r):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "jobs": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:6379/0",
        },
    }
    configure(CACHE_ALIAS="jobs")
    from django_redis import get_redis_connection

    assert connection.get_client() is get_redis_connection("jobs")
    tj.record.enqueue("via-cache")
    assert r.llen(keys.queue("default")) == 1
    assert connection.describe_target() == "cache alias 'jobs'"


def test_sentinel_target_is_described(configure):
    configure(SENTINELS=[("127.0.0.1", free_port())], SENTINEL_MASTER="mymaster")
    assert connection.describe_target().startswith("sentinel mymaster@127.0.0.1:")
