"""A home (store/homes.py): the questions callers ask of it instead of asking whether
this is a cluster, answered the same way on one server and on a cluster: with one home
nothing crosses; with a home per queue every queue's home crosses the prefix's."""

from __future__ import annotations

import pytest
from django.test import override_settings

from cogworker_django.store import homes, keys
from cogworker_django.store.homes import Home

CLUSTER_URL = "redis://127.0.0.1:7000/0"  # names only: nothing here connects


class NoRedis:
    def __getattr__(self, name):
        raise AssertionError(f"read Redis ({name}) where one home needs no read")


def test_on_one_server_every_queue_lives_in_the_prefixs_home(prefix):
    root = Home.root()
    assert root == keys.root() == Home.of_queue("a") == Home.of_job({"queue": "b"})
    assert not Home.of_queue("a").crosses(root)
    assert not Home.of_queue("a").lists_apart()
    assert Home.of_queue("a").listing_keys() == [keys.queues()]
    assert homes.all_homes(NoRedis()) == [root]
    assert homes.process_homes(NoRedis(), "w1") == [root]
    assert homes.group_by_home(["a", "b"]) == [(root, ["a", "b"])]


@override_settings(
    COGWORKER={"REDIS_URL": CLUSTER_URL, "CLUSTER": True, "PREFIX": "cw", "TEST_PREFIX": False}
)
def test_with_a_home_per_queue_a_queues_home_crosses_the_prefixs():
    a, root = Home.of_queue("a"), Home.root()
    assert a == "{cw|a}" and root == "{cw}"
    assert a.crosses(root) and a.lists_apart() and a.listing_keys() == []
    assert not a.crosses(Home.of_queue("a")) and a.crosses(Home.of_queue("b"))
    assert not root.lists_apart() and root.listing_keys() == [keys.queues()]
    assert Home.of_job({"queue": "a"}) == a
    assert Home.of_job({"func": "x"}) == root == Home.of_job("not a payload")
    assert (a.schedule(), a.retry(), a.dead(), a.unsettled(), a.paused()) == (
        keys.schedule(a),
        keys.retry(a),
        keys.dead(a),
        keys.unsettled(a),
        keys.paused(a),
    )
    assert a.inprogress("w1") == keys.inprogress("w1", a)
    assert a.key_types() == keys.home_types(a)
    # Every key a home builds hashes to its slot: its tag leads the name.
    assert all(k.startswith("{cw|a}") for k in a.key_types())
    assert homes.group_by_home(["a", "b", "a2", "b"]) == [
        ("{cw|a}", ["a"]),
        ("{cw|b}", ["b", "b"]),
        ("{cw|a2}", ["a2"]),
    ]


@override_settings(
    COGWORKER={"REDIS_URL": CLUSTER_URL, "CLUSTER": True, "PREFIX": "{cw}", "TEST_PREFIX": False}
)
def test_a_prefix_with_its_own_tag_keeps_one_home_on_a_cluster():
    assert Home.of_queue("a") == Home.root() == "{cw}"
    assert not Home.of_queue("a").lists_apart()
    assert homes.all_homes(NoRedis()) == ["{cw}"]


def test_a_home_is_its_name_wherever_a_name_went(prefix):
    root = Home.root()
    assert {keys.root(): 1}[root] == 1 and isinstance(root, str)
    assert keys.schedule(root) == root.schedule()


@pytest.mark.parametrize("queue", ["", None, 3])
def test_a_job_without_a_queue_name_is_filed_in_the_prefixs_home(prefix, queue):
    assert Home.of_job({"queue": queue}) == Home.root()
