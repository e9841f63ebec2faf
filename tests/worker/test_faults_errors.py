"""Real Redis error replies, produced by private redis-servers, classified by
``errors.is_unavailable`` (rule 12): every outage shape is "unavailable", WRONGTYPE is not.

redis-py turns several replies into its own classes and strips their code from the
message (READONLY, OOM, MASTERDOWN, LOADING...), so only real replies prove the point."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from cogworker_django.store import errors

from ..helpers import wait_until


def _error_of(fn) -> BaseException:
    with pytest.raises(redis.RedisError) as info:
        fn()
    return info.value


def test_readonly_from_a_replica(redis_server):
    master = redis_server()
    replica = redis_server(extra=["--replicaof", "127.0.0.1", str(master.port)])
    exc = _error_of(lambda: replica.client().set("k", "v"))
    assert "read only replica" in str(exc)
    assert errors.is_unavailable(exc)


def test_readonly_for_a_script_on_a_replica(redis_server):
    master = redis_server()
    replica = redis_server(extra=["--replicaof", "127.0.0.1", str(master.port)])
    exc = _error_of(lambda: replica.client().eval("return redis.call('SET', 'k', 'v')", 0))
    assert errors.is_unavailable(exc), repr(exc)


def test_masterdown_from_a_stale_replica(redis_server):
    master = redis_server()
    replica = redis_server(
        extra=["--replicaof", "127.0.0.1", str(master.port), "--replica-serve-stale-data", "no"]
    )
    master.stop()
    exc = wait_until(lambda: _masterdown(replica), 10, message="MASTERDOWN")
    assert errors.is_unavailable(exc)


def _masterdown(replica):
    try:
        replica.client().get("k")
    except redis.RedisError as exc:
        return exc
    return None


def test_oom_under_noeviction(redis_server):
    server = redis_server(extra=["--maxmemory-policy", "noeviction"])
    c = server.client()
    c.config_set("maxmemory", 1)
    exc = _error_of(lambda: c.set("k", "v"))
    assert errors.is_unavailable(exc)


def test_unblocked_blocking_command(redis_server):
    server = redis_server()
    blocked = server.client()
    my_id = blocked.client_id()
    result = {}

    def block():
        try:
            blocked.brpop(["nothing"], timeout=5)
        except redis.RedisError as exc:
            result["exc"] = exc

    t = threading.Thread(target=block)
    t.start()
    other = server.client()
    wait_until(lambda: other.client_unblock(my_id, error=True), 5, message="client unblocked")
    t.join(5)
    assert str(result["exc"]).startswith("UNBLOCKED")
    assert errors.is_unavailable(result["exc"])


def test_busy_script(redis_server):
    server = redis_server(extra=["--busy-reply-threshold", "100"])
    runner = server.client()
    t = threading.Thread(
        target=lambda: _swallow(lambda: runner.eval("while true do end", 0)), daemon=True
    )
    t.start()
    time.sleep(0.5)
    exc = _error_of(lambda: server.client().get("k"))
    assert str(exc).startswith("BUSY")
    assert errors.is_unavailable(exc)
    server.client().script_kill()
    t.join(5)


def _swallow(fn):
    try:
        fn()
    except redis.RedisError:
        pass


def test_connection_refused_and_timeout(redis_server):
    server = redis_server()
    c = server.client()
    c.client_pause(2000)
    slow = redis.Redis(port=server.port, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
    assert errors.is_unavailable(_error_of(lambda: slow.get("k")))  # TimeoutError
    server.stop()
    assert errors.is_unavailable(_error_of(lambda: slow.get("k")))  # refused


def test_wrongtype_is_deterministic(redis_server):
    c = redis_server().client()
    c.set("k", "v")
    assert not errors.is_unavailable(_error_of(lambda: c.lpush("k", "x")))
    assert not errors.is_unavailable(
        _error_of(lambda: c.eval("return redis.call('LPUSH', KEYS[1], 'x')", 1, "k"))
    )
