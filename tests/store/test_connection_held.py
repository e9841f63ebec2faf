"""connection.Held, the feeder's own connection (real Redis servers): one connection
reused for every command, kept after an error reply, dropped after a broken one (the
next command takes a fresh one), following a client rebuilt with new settings, and
routing through the cluster client on a cluster."""

from __future__ import annotations

import pytest
import redis

from cogworker_django.store import connection, scripts


def conn_ids(client) -> set[int]:
    return {c["id"] for c in client.client_list()}


def test_one_connection_for_every_command(redis_server, configure):
    server = redis_server()
    configure(REDIS_URL=server.url)
    held = connection.Held()
    held.execute_command("SET", "k", "1")
    ours = held.execute_command("CLIENT", "ID")
    for _ in range(20):
        assert held.execute_command("CLIENT", "ID") == ours
    assert held.execute_command("GET", "k") in (b"1", "1")
    held.close()


def test_an_error_reply_keeps_the_connection_a_broken_one_is_replaced(redis_server, configure):
    server = redis_server()
    configure(REDIS_URL=server.url)
    held = connection.Held()
    first = held.execute_command("CLIENT", "ID")
    with pytest.raises(redis.ResponseError):
        held.execute_command("INCR", "not-a-command-argument", "extra")
    assert held.execute_command("CLIENT", "ID") == first  # still in step: kept
    server.client().client_kill_filter(_id=first)
    with pytest.raises(redis.ConnectionError):
        held.execute_command("CLIENT", "ID")
    assert held.execute_command("CLIENT", "ID") != first  # a fresh one
    server.stop()
    with pytest.raises(redis.ConnectionError):
        held.execute_command("PING")
    server.start()
    assert held.execute_command("PING") in (True, b"PONG", "PONG")
    held.close()


def test_scripts_run_on_it_and_are_loaded_again_after_a_flush(redis_server, configure):
    server = redis_server()
    configure(REDIS_URL=server.url)
    held = connection.Held()
    beat = scripts.get("fetch")
    assert beat(held, ["inprogress", "paused", "queue"], [0, 0, 1, "", "", "", "q"]) == []
    server.client().script_flush()
    assert (
        beat(held, ["inprogress", "paused", "queue"], [0, 0, 1, "", "", "", "q"]) == []
    )  # NOSCRIPT: loaded
    held.close()


def test_it_follows_a_client_rebuilt_with_new_settings(redis_server, configure):
    a, b = redis_server(), redis_server()
    configure(REDIS_URL=a.url)
    held = connection.Held()
    held.execute_command("SET", "where", "a")
    configure(REDIS_URL=b.url)
    assert held.execute_command("GET", "where") is None  # the new server
    held.execute_command("SET", "where", "b")
    assert a.client().get("where") in (b"a", "a") and b.client().get("where") in (b"b", "b")
    held.close()


@pytest.mark.cluster
def test_on_a_cluster_each_command_is_routed_by_the_client(r, prefix):
    held = connection.Held()
    key = f"{prefix}:held"
    held.execute_command("SET", key, "1")
    assert r.get(key) == "1"
    fetch = scripts.get("fetch")
    ip, paused, queue = (f"{prefix}:{name}" for name in ("inprogress:x", "paused", "queue:q"))
    r.lpush(queue, "job")
    assert fetch(held, [ip, paused, queue], [0, 0, 1, "", "", "", "q"]) in (
        [b"q", b"job"],
        ["q", "job"],
    )
    held.close()
