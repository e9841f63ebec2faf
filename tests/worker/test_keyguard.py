"""The key guard in this process, against the real Redis: what it checks, how it moves a
key aside, pruning, and the admin functions. (With a running worker: test_faults_keyguard.)"""

from __future__ import annotations

import logging

import pytest

from cogworker_django.api import quarantine as quarantine_api
from cogworker_django.observe import stats
from cogworker_django.store import keys
from cogworker_django.worker import keyguard

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]


def _copies(r, key):
    return sorted(r.scan_iter(match=keyguard.glob_escape(keys.quarantine_prefix(key)) + "*"))


def test_a_fixed_key_of_the_wrong_type_is_moved_aside_with_one_error_line(r, caplog):
    r.set(keys.dead(keys.home_of("default")), "oops")
    r.zadd(keys.retry(keys.home_of("default")), {"fine": 1})
    with caplog.at_level(logging.ERROR, logger="cogworker_django"):
        assert keyguard.check(queues=["default"]) == [keys.dead(keys.home_of("default"))]
    assert not r.exists(keys.dead(keys.home_of("default")))
    assert r.zcard(keys.retry(keys.home_of("default"))) == 1
    (copy,) = _copies(r, keys.dead(keys.home_of("default")))
    assert r.get(copy) == "oops"
    assert 29 * 86400 < r.ttl(copy) <= 30 * 86400
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 1
    assert (
        f"{keys.dead(keys.home_of('default'))} held a string, not a zset: moved to {copy}"
        in lines[0]
    )
    assert keyguard.check(queues=["default"]) == []  # nothing left to do


def test_every_kind_of_key_is_checked(r, prefix):
    r.sadd(keys.queues(), "listed")
    r.sadd(keys.processes(), "p1")
    r.sadd(keys.inprogress_ids(), "p2")
    r.hset(keys.periodic_schedule(), "nightly", "{}")
    expected = keyguard.expected_types(r, ["configured"])
    for key, kind in keys.fixed_types().items():
        assert expected[key] == kind
    assert expected[keys.stat("processed", stats.today())] == "string"
    assert expected[keys.queue("configured")] == "list"
    assert expected[keys.queue("listed")] == "list"
    assert expected[keys.process("p1")] == "hash"
    assert expected[keys.work("p1")] == "hash"
    assert expected[keys.inprogress("p2", keys.home_of("configured"))] == "list"
    assert expected[keys.periodic_last_slot("nightly")] == "string"
    assert expected[keys.periodic_running("nightly")] == "string"
    # and each of them, holding a wrong type, is moved in one pass (the registries that
    # list the others stay right here; they have their own test below)
    registries = {keys.queues(), keys.processes(), keys.inprogress_ids(), keys.periodic_schedule()}
    wrong = set(expected) - registries
    for key in wrong:
        if expected[key] == "string":
            r.rpush(key, "x")
        else:
            r.set(key, "x")
    assert set(keyguard.check(r, ["configured"])) == wrong
    for key in wrong:
        assert not r.exists(key) and _copies(r, key)


def test_a_registry_of_the_wrong_type_lists_nothing_and_is_moved(r):
    r.set(keys.processes(), "x")
    r.set(keys.queues(), "y")
    assert set(keyguard.check(r, [])) == {keys.processes(), keys.queues()}


def test_the_type_is_rechecked_atomically_with_the_move(r):
    r.zadd(keys.dead(keys.home_of("default")), {"a": 1})
    assert (
        keyguard.quarantine(r, keys.dead(keys.home_of("default")), "zset") is None
    )  # right type: left alone
    assert (
        keyguard.quarantine(r, keys.schedule(keys.home_of("default")), "zset") is None
    )  # gone: nothing to move
    assert r.zcard(keys.dead(keys.home_of("default"))) == 1
    assert not list(r.scan_iter(match=keys.quarantine_root(keys.home_of("default")) + "*"))


def test_a_ttl_on_the_wrong_key_is_replaced_by_the_quarantine_ttl(r):
    r.set(keys.paused(keys.home_of("default")), "x", ex=5)
    keyguard.check(r, ["default"])
    (copy,) = _copies(r, keys.paused(keys.home_of("default")))
    assert r.ttl(copy) > 86400


def test_only_the_newest_five_copies_of_exactly_that_key_are_kept(r):
    key, longer = keys.queue("a"), keys.queue("a:b")
    r.set(longer, "x")
    keyguard.quarantine(r, longer, "list")
    made = []
    for i in range(7):
        r.set(key, f"v{i}")
        made.append(keyguard.quarantine(r, key, "list"))
    left = _copies(r, key)
    # the copies of "<key>:b" match the same glob but are not this key's (with a home per
    # queue they are in queue "a:b"'s home, so not even matched)
    longer_copies = [c for c in left if c.startswith(keys.quarantine_prefix(longer))]
    assert len(longer_copies) == (0 if keys.spread() else 1)
    mine = [c for c in left if not c.startswith(keys.quarantine_prefix(longer))]
    assert [ms for ms, _ in keyguard.copies(r, key)] == sorted(
        [ms for ms, _ in keyguard.copies(r, key)], reverse=True
    )
    assert len(mine) == 5
    assert set(mine) == set(made[2:])
    assert {r.get(c) for c in mine} == {f"v{i}" for i in range(2, 7)}


def test_quarantined_lists_newest_first_with_type_size_and_ttl(r):
    r.set(keys.dead(keys.home_of("default")), "abc")
    keyguard.quarantine(r, keys.dead(keys.home_of("default")), "zset")
    r.rpush(keys.retry(keys.home_of("default")), "x", "y")
    keyguard.quarantine(r, keys.retry(keys.home_of("default")), "zset")
    listed = quarantine_api.quarantined()
    assert [q["original_key"] for q in listed] == [
        keys.retry(keys.home_of("default")),
        keys.dead(keys.home_of("default")),
    ]
    first = listed[0]
    assert first["type"] == "list" and first["size"] == 2
    assert first["key"].startswith(keys.quarantine_prefix(keys.retry(keys.home_of("default"))))
    assert isinstance(first["moved_at"], int) and first["moved_at"] >= listed[1]["moved_at"]
    assert first["ttl"] > 0
    assert listed[1]["type"] == "string" and listed[1]["size"] == 3
    assert quarantine_api.quarantined(start=1, count=5) == listed[1:]
    assert quarantine_api.quarantined(start=2) == []


@pytest.mark.parametrize(
    "kind,make",
    [
        ("string", lambda r, k: r.set(k, "<b>" + "s" * 10_000)),
        ("list", lambda r, k: r.rpush(k, *[f"item{i}" for i in range(100)])),
        ("set", lambda r, k: r.sadd(k, *[f"m{i}" for i in range(100)])),
        ("zset", lambda r, k: r.zadd(k, {f"z{i}": i for i in range(100)})),
        ("hash", lambda r, k: r.hset(k, mapping={f"f{i}": "v" * 1000 for i in range(100)})),
        ("stream", lambda r, k: [r.xadd(k, {"a": str(i)}) for i in range(100)]),
    ],
)
def test_preview_is_bounded_for_every_type(r, kind, make):
    expected = "hash" if kind != "hash" else "list"
    key = keys.unsettled(keys.home_of("default")) if expected == "list" else keys.last_beat()
    make(r, key)
    copy = keyguard.quarantine(r, key, expected)
    text = quarantine_api.preview(copy)
    assert text.startswith(kind)
    assert len(text) <= quarantine_api.PREVIEW_CHARS + 10
    assert len(text.splitlines()) <= quarantine_api.PREVIEW_ITEMS + 2


def test_preview_and_delete_refuse_other_keys(r):
    r.zadd(keys.dead(keys.home_of("default")), {"job": 1})
    for bad in (
        keys.dead(keys.home_of("default")),
        keys.quarantine_root(keys.home_of("default")) + "nope",
        "other:key",
    ):
        with pytest.raises(ValueError):
            quarantine_api.preview(bad)
        with pytest.raises(ValueError):
            quarantine_api.delete(bad)
    assert r.zcard(keys.dead(keys.home_of("default"))) == 1


def test_delete_removes_a_copy(r):
    r.set(keys.dead(keys.home_of("default")), "x")
    copy = keyguard.quarantine(r, keys.dead(keys.home_of("default")), "zset")
    assert quarantine_api.delete(copy) is True
    assert quarantine_api.delete(copy) is False
    assert quarantine_api.preview(copy) == "(gone: expired or deleted)"
    assert quarantine_api.quarantined() == []
