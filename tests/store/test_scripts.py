"""Lua scripts: files with headers, EVALSHA with a reload after SCRIPT FLUSH."""

import threading
from importlib import resources

import pytest

from cogworker_django.store import connection, errors, scripts

from ..helpers import ReplyCutter


def lua_files():
    return sorted(
        p.name
        for p in resources.files("cogworker_django.store").joinpath("lua").iterdir()
        if p.name.endswith(".lua")
    )


@pytest.mark.parametrize("name", lua_files())
def test_every_script_has_a_header_naming_keys_and_argv(name):
    source = resources.files("cogworker_django.store").joinpath("lua", name).read_text()
    header = [line for line in source.splitlines() if line.startswith("--")]
    assert source.startswith("--"), f"{name} must open with its header"
    assert any("KEYS" in line for line in header) and any("ARGV" in line for line in header)
    scripts.get(name[:-4])  # loads and checks


def test_noscript_reloads_after_script_flush(redis_server, configure, prefix):
    server = redis_server()
    configure(REDIS_URL=server.url)
    client = connection.get_client()
    key = f"{prefix}:lock"
    client.set(key, "me")
    assert scripts.run("owned_expire", client, [key], ["me", 30]) == 1
    server.client().script_flush()
    assert server.client().script_exists(scripts.get("owned_expire").sha) == [False]
    assert scripts.run("owned_expire", client, [key], ["me", 40]) == 1
    assert server.client().ttl(key) > 30


def test_an_included_part_is_expanded_into_the_script_sent():
    fetch = scripts.get("fetch")
    assert scripts.INCLUDE not in fetch.source
    assert "local function best_priority(zkey)" in fetch.source
    assert "local function best_priority(zkey)" in scripts.get("basic_fetch").source
    placing = ("requeue_due", "recover_job", "unique_push", "outbox_relay", "periodic_push")
    for name in (*placing, "batch_push", "batch_update"):
        assert "local function place(" in scripts.get(name).source


def test_an_include_of_no_part_is_refused():
    with pytest.raises(RuntimeError, match="no lua/include/nothing_here.lua"):
        scripts.expand("-- KEYS ARGV\n--@include nothing_here\n", "x")
    with pytest.raises(RuntimeError, match="no lua/include"):
        scripts.expand("--@include ../fetch\n", "x")
    assert scripts.expand("-- a\nreturn 1\n", "x") == "-- a\nreturn 1\n"


def test_a_part_that_includes_another_is_refused(tmp_path):
    (tmp_path / "inner.lua").write_text("local x = 1\n")
    (tmp_path / "outer.lua").write_text("--@include inner\n")
    assert (
        scripts.expand("--@include inner\nreturn x\n", "x", tmp_path) == "local x = 1\nreturn x\n"
    )
    with pytest.raises(RuntimeError, match="one level only"):
        scripts.expand("--@include outer\n", "x", tmp_path)


def _stats(client, name):
    """INFO commandstats for ``name``: {"calls": n, "failed_calls": n, ...}."""
    return client.info("commandstats").get(f"cmdstat_{name}", {"calls": 0, "failed_calls": 0})


def test_a_pipelined_script_the_server_flushed_runs_once_in_its_place(
    redis_server, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    client = connection.get_client()
    plain = server.client()
    key = f"{prefix}:lock"
    client.set(key, "me")
    plain.script_flush()
    plain.config_resetstat()
    pipe = client.pipeline(transaction=False)
    pipe.set(f"{prefix}:before", "1")
    scripts.get("owned_expire").pipelined(pipe, [key], ["me", 40])
    scripts.get("owned_expire").pipelined(pipe, [key], ["someone else", 50])
    pipe.get(f"{prefix}:before")
    assert scripts.execute(pipe, client) == [True, 1, 0, b"1"]
    assert 30 < plain.ttl(key) <= 40
    # Each script refused once (NOSCRIPT, nothing run), loaded, then run once.
    evalsha = _stats(plain, "evalsha")
    assert (evalsha["calls"], evalsha["failed_calls"]) == (4, 2)
    assert plain.script_exists(scripts.get("owned_expire").sha) == [True]
    # Known now: the next pipeline's scripts run where they are, in one round trip.
    pipe = client.pipeline(transaction=False)
    scripts.get("owned_expire").pipelined(pipe, [key], ["me", 45])
    assert scripts.execute(pipe, client) == [1]
    evalsha = _stats(plain, "evalsha")
    assert (evalsha["calls"], evalsha["failed_calls"]) == (5, 2)


def test_a_pipelined_script_that_fails_leaves_its_error_in_its_place(r, prefix):
    key = f"{prefix}:hash"
    r.hset(key, "a", "1")  # owned_expire GETs it: WRONGTYPE
    pipe = connection.get_client().pipeline(transaction=False)
    scripts.get("owned_expire").pipelined(pipe, [key], ["me", 40])
    pipe.set(f"{prefix}:after", "1")
    replies = scripts.execute(pipe, connection.get_client(), raise_on_error=False)
    assert "WRONGTYPE" in str(replies[0]) and replies[1] is True
    pipe = connection.get_client().pipeline(transaction=False)
    scripts.get("owned_expire").pipelined(pipe, [key], ["me", 40])
    with pytest.raises(Exception, match="WRONGTYPE"):
        scripts.execute(pipe, connection.get_client())


def test_a_pipeline_run_again_is_a_new_batch(r, prefix):
    key = f"{prefix}:lock"
    r.set(key, "me")
    client = connection.get_client()
    pipe = client.pipeline(transaction=False)
    pipe.set(f"{prefix}:x", "1")
    pipe.execute()  # run by redis-py itself: nothing of it is kept
    scripts.get("owned_expire").pipelined(pipe, [key], ["me", 40])
    assert scripts.execute(pipe, client) == [1]


def test_a_script_is_not_pipelined_inside_multi(r, prefix):
    pipe = connection.get_client().pipeline(transaction=True)
    with pytest.raises(ValueError, match="outside MULTI"):
        scripts.get("owned_expire").pipelined(pipe, [f"{prefix}:lock"], ["me", 40])


@pytest.mark.spread
def test_a_pipeline_across_nodes_runs_its_flushed_scripts(r, redis_mode):
    from cogworker_django.store import keys

    client = connection.get_client()
    names = [keys.queue(f"q{i}") for i in range(6)]  # a home per queue: several nodes
    assert len({client.keyslot(k) for k in names}) > 1
    for k in names:
        client.set(k, "me")
    sha = scripts.get("owned_expire").sha
    for node in r.get_primaries():
        r.get_redis_connection(node).script_flush()
        assert r.get_redis_connection(node).script_exists(sha) == [False]
    pipe = client.pipeline(transaction=False)
    for k in names:
        scripts.get("owned_expire").pipelined(pipe, [k], ["me", 40])
    assert scripts.execute(pipe, client) == [1] * len(names)
    assert all(30 < client.ttl(k) <= 40 for k in names)


def _refused_pipeline(client, prefix):
    key = f"{prefix}:lock"
    client.set(key, "me")
    pipe = client.pipeline(transaction=False)
    scripts.get("owned_expire").pipelined(pipe, [key], ["me", 40])
    pipe.get(key)
    return pipe, key


@pytest.fixture
def behind_a_proxy(redis_server, configure):
    """A private server that forgot its scripts, reached through a ReplyCutter: yields
    (server, proxy, the package's client)."""
    server = redis_server()
    proxy = ReplyCutter(server)
    try:
        configure(REDIS_URL=proxy.url)
        server.client().script_flush()
        yield server, proxy, connection.get_client()
    finally:
        proxy.close()


def test_a_load_whose_reply_is_lost_is_every_refused_scripts_reply(behind_a_proxy, prefix):
    # The repair's SCRIPT LOAD ran in Redis but its reply never came (a dropped
    # connection): the refused script's reply is that outage, as the pipeline's own
    # failure would have been; the plain command's reply stands.
    _server, proxy, client = behind_a_proxy
    pipe, key = _refused_pipeline(client, prefix)
    proxy.arm(scripts.get("owned_expire").sha.encode())  # the load's reply: the SHA
    replies = scripts.execute(pipe, client, raise_on_error=False)
    assert proxy.cut.is_set()
    assert errors.is_unavailable(replies[0]), replies[0]
    assert replies[1] == b"me"
    # The load went through before its reply was lost: the next pipeline finds it.
    pipe, key = _refused_pipeline(client, prefix)
    assert scripts.execute(pipe, client) == [1, b"me"]


def test_a_script_flushed_again_before_its_second_run_is_run_alone(behind_a_proxy, prefix):
    # Flushed between the repair's load and its pipeline (on a cluster: a master the
    # load did not reach): refused twice, then loaded and run on its own, once.
    server, proxy, client = behind_a_proxy
    plain = server.client()
    pipe, key = _refused_pipeline(client, prefix)
    proxy.hold(scripts.get("owned_expire").sha.encode())  # the load's reply
    out: list = []
    runner = threading.Thread(target=lambda: out.append(scripts.execute(pipe, client)))
    plain.config_resetstat()
    runner.start()
    assert proxy.held.wait(10)
    plain.script_flush()
    proxy.release()
    runner.join(10)
    assert out == [[1, b"me"]]
    evalsha = _stats(plain, "evalsha")
    # The pipeline's and the repair's, refused; the lone run's: refused, loaded, ran.
    assert (evalsha["calls"], evalsha["failed_calls"]) == (4, 3)
    assert 30 < plain.ttl(key) <= 40
