"""Lua scripts: files with headers, EVALSHA with a reload after SCRIPT FLUSH."""

from importlib import resources

import pytest

from cogworker_django.store import connection, scripts


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
