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
