"""COGWORKER["CLUSTER"]: the settings, the client (lazy, no retries, REDIS_OPTIONS
applied), the system check, and a cluster that is down or is not a cluster at all.
Everything here talks to a real local cluster (tests/cluster_support.py). Worker
processes on a cluster (the command's boot line and exit, script calls per job, a worker
SIGKILLed with jobs in the homes of two masters) are in tests/store/test_store_workers.py.
"""

from __future__ import annotations

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from redis.crc import key_slot
from testapp import jobs as tj

from cogworker_django import checks, conf
from cogworker_django.api.server import RedisServer
from cogworker_django.store import cluster, connection, errors, keys

from ..helpers import (
    forked_child_gets_its_own_client,
    free_port,
    run_command,
)


@pytest.fixture
def cluster_url(local_cluster):
    return local_cluster.url


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"CLUSTER": "yes"}, "expected True or False"),
        ({"CLUSTER": True, "SENTINELS": [("h", 26379)], "SENTINEL_MASTER": "m"}, "SENTINELS"),
        ({"CLUSTER": True, "CACHE_ALIAS": "default"}, "CACHE_ALIAS"),
        ({"CLUSTER": True, "REDIS_URL": "unix:///tmp/redis.sock"}, "over TCP"),
        ({"CLUSTER": True, "REDIS_URL": "redis://127.0.0.1:7000/2"}, "database 0 only"),
        ({"CLUSTER": True, "REDIS_URL": "redis://127.0.0.1:7000?db=1"}, "database 0 only"),
        ({"CLUSTER": True, "PREFIX": "{a}{b}"}, "one hash tag"),
        ({"CLUSTER": True, "PREFIX": "a}b{"}, "one hash tag"),
        ({"CLUSTER": True, "PREFIX": "{}x"}, "one hash tag"),
    ],
)
def test_bad_cluster_settings_are_clear_errors(values, fragment):
    with pytest.raises(ImproperlyConfigured, match=fragment):
        conf._validate({"REDIS_URL": "redis://127.0.0.1:7000/0", **values})


def test_good_cluster_settings():
    for prefix in ("cogworker", "{cogworker}", "app:{jobs}"):
        s = conf._validate({"CLUSTER": True, "REDIS_URL": "redis://n:7000", "PREFIX": prefix})
        assert s.CLUSTER is True
    assert conf._validate({}).CLUSTER is False
    # Off, braces in a prefix are just characters, as they always were.
    assert conf._validate({"PREFIX": "{a}{b}"}).PREFIX == "{a}{b}"


def test_the_cluster_client_never_retries_and_takes_redis_options(configure, cluster_url):
    configure(REDIS_URL=cluster_url, CLUSTER=True, REDIS_OPTIONS={"socket_timeout": 9.5})
    client = connection.get_client()
    assert isinstance(client, cluster.LazyCluster)
    assert client.ping() is True
    built = client.built()
    # The cluster client's own retry (a timed-out command re-sent to a new master) is
    # off, and every node's connections have the options and no retries (rule 11).
    assert built.retry.get_retries() == 0
    for node in built.get_nodes():
        kwargs = node.redis_connection.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == 9.5
        assert kwargs["socket_connect_timeout"] == conf.DEFAULT_CONNECT_TIMEOUT
        assert kwargs["retry"].get_retries() == 0
    assert connection.unsafe_options(client) == []
    assert connection.longest_call() >= 9.5


def test_redis_options_that_would_retry_are_refused_in_cluster_mode_too(configure, cluster_url):
    with pytest.raises(ImproperlyConfigured, match="retry"):
        configure(REDIS_URL=cluster_url, CLUSTER=True, REDIS_OPTIONS={"retry_on_timeout": True})
        conf.get()
    configure(REDIS_URL=cluster_url + "?socket_timeout=1", CLUSTER=True, REDIS_OPTIONS={})
    with pytest.raises(ImproperlyConfigured):
        conf.get()


def test_a_cluster_that_is_down_is_an_outage_not_a_crash(configure):
    url = f"redis://127.0.0.1:{free_port()}/0"
    configure(REDIS_URL=url, CLUSTER=True)
    client = connection.get_client()  # never raises: a worker thread holds it for life
    with pytest.raises(redis.ConnectionError) as caught:
        client.pipeline(transaction=False)
    assert errors.is_unavailable(caught.value)
    assert "cannot be reached" in str(caught.value)
    with pytest.raises(redis.ConnectionError):
        tj.record.enqueue("x")  # the push raises what a single Redis would: an outage
    [message] = checks.redis_messages()
    assert message.id == "cogworker.E002" and "unreachable" in message.msg


def test_check_says_the_cluster_answers_and_how_many_masters(prefix, cluster_url):
    done = run_command(
        prefix,
        "check",
        "--deploy",
        "--tag",
        checks.REDIS_TAG,
        redis_url=cluster_url,
        env={"COGWORKER_CLUSTER": "1"},
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    assert "Redis Cluster at cluster redis://" in out
    assert "3 masters, 0 replicas, all 16384 slots served" in out
    assert "cogworker.I001" in out


def _home_keys(home: str) -> list[str]:
    return [
        keys.inprogress("id", home),
        keys.retry(home),
        keys.dead(home),
        keys.schedule(home),
        keys.paused(home),
        keys.unsettled(home),
        keys.unique("d", home),
        keys.relayed("e", home),
    ]


def test_a_prefix_with_its_own_tag_keeps_every_key_in_one_slot(configure, cluster_url):
    configure(REDIS_URL=cluster_url, CLUSTER=True, PREFIX="app:{jobs}")
    assert not keys.spread()
    built = [
        keys.queue("a"),
        keys.queue("b"),
        keys.priority_queue("b"),
        *_home_keys(keys.home_of("a")),
        keys.periodic_running("n"),
        keys.periodic_lock("n", 1),
        keys.periodic_claims("id"),
        keys.history(),
        keys.result("r"),
        keys.result_ended("r"),
        keys.quarantine(keys.queue("a"), 1, "ab"),
        *keys.limit_keys("l"),
        *keys.batch_keys("b"),
        *keys.fixed_types(),
    ]
    assert all(k.startswith("app:{jobs}:") for k in built)
    assert {key_slot(k.encode()) for k in built} == {key_slot(b"jobs")}
    configure(PREFIX="{jobs}")
    assert keys.queue("a") == "{jobs}:queue:a"


def test_a_plain_prefix_gives_each_queue_a_home_of_its_own(configure, cluster_url):
    """What one script touches is in one slot: a queue's lists and its home's sets; the
    prefix's own keys (registries, periodic, batches, history) in the prefix's."""
    configure(REDIS_URL=cluster_url, CLUSTER=True, PREFIX="app")
    assert keys.spread()
    assert keys.root() == "{app}"
    for q in ("a", "b", "mail:high"):
        home = keys.home_of(q)
        assert home == "{app|" + q + "}"
        built = [keys.queue(q), keys.priority_queue(q), *_home_keys(home)]
        built.append(keys.quarantine(keys.queue(q), 1, "ab"))
        assert {key_slot(k.encode()) for k in built} == {key_slot(("app|" + q).encode())}
        assert all(keys.home_part(k) == home for k in built)
    # Redis hashes up to the first "}": such a queue is in the home of what comes before.
    assert keys.home_of("x}y") == keys.home_of("x")
    own = [
        keys.periodic_running("n"),
        keys.periodic_claims("id"),
        keys.history(),
        keys.result("r"),
        keys.result_ended("r"),
        keys.outbox(),
        keys.inprogress_homes("id"),
        *keys.limit_keys("l"),
        *keys.batch_keys("b"),
        *keys.fixed_types(),
    ]
    assert {key_slot(k.encode()) for k in own} == {key_slot(b"app")}
    # The queue homes hash apart: on a 3-master cluster, queues spread over masters.
    slots = {key_slot(keys.queue(f"q{i}").encode()) for i in range(30)}
    assert len(slots) == 30


def test_a_plain_cluster_prefix_may_not_hold_a_bar():
    with pytest.raises(ImproperlyConfigured, match="|"):
        conf._validate({"CLUSTER": True, "REDIS_URL": "redis://n:7000", "PREFIX": "a|b"})


# Keys of a home (keys.py): with CLUSTER off there is one, the prefix's own, passed last.
PER_HOME = {
    "paused",
    "schedule",
    "retry",
    "dead",
    "unsettled",
    "quarantine_root",
    "inprogress",
    "unique",
    "relayed",
}


def _built(name, args=()):
    if name in PER_HOME:
        args = (*args, keys.root())
    return getattr(keys, name)(*args)


# Every key name with CLUSTER off, spelled out: an upgrade must find the jobs, locks and
# history an older version left in Redis under exactly these names.
PINNED = {
    "queues": "cw:queues",
    "paused": "cw:paused",
    "schedule": "cw:schedule",
    "retry": "cw:retry",
    "dead": "cw:dead",
    "processes": "cw:processes",
    "inprogress_ids": "cw:inprogress_ids",
    "last_beat": "cw:last_beat",
    "live_queues": "cw:live_queues",
    "unsettled": "cw:unsettled",
    "outbox": "cw:outbox",
    "periodic_schedule": "cw:periodic:schedule",
    "periodic_disabled": "cw:periodic:disabled",
    "periodic_claimers": "cw:periodic:claimers",
    "periodic_version": "cw:periodic:version",
    "history": "cw:history",
    "batches": "cw:batches",
    "cancels": "cw:cancels",
    "quarantine_root": "cw:quarantine:",
}
PINNED_WITH_ARGS = {
    ("stat", ("processed",)): "cw:stat:processed",
    ("stat", ("failed", "2026-01-01")): "cw:stat:failed:2026-01-01",
    ("queue", ("q",)): "cw:queue:q",
    ("priority_queue", ("q",)): "cw:pqueue:q",
    ("bell", ("q",)): "cw:bell:q",
    ("process", ("h:1:ab",)): "cw:process:h:1:ab",
    ("work", ("h:1:ab",)): "cw:work:h:1:ab",
    ("inprogress", ("h:1:ab",)): "cw:inprogress:h:1:ab",
    ("inprogress_homes", ("h:1:ab",)): "cw:inprogress_homes:h:1:ab",
    ("signal", ("h:1:ab",)): "cw:signal:h:1:ab",
    ("relayed", ("e1",)): "cw:relayed:e1",
    ("durable_relay_lock", ("default",)): "cw:durable:relaying:default",
    ("unique", ("d1",)): "cw:unique:d1",
    ("periodic_last_slot", ("n",)): "cw:periodic:last_slot:n",
    ("periodic_lock", ("n", 60)): "cw:periodic:lock:n:60",
    ("periodic_running", ("n",)): "cw:periodic:running:n",
    ("periodic_claims", ("h:1:ab",)): "cw:periodic:claims:h:1:ab",
    ("result", ("r1",)): "cw:result:r1",
    ("result_ended", ("r1",)): "cw:ended:r1",
    ("batch", ("b1",)): "cw:batch:b1",
    ("batch_pending", ("b1",)): "cw:batch:b1:pending",
    ("batch_waiting", ("b1",)): "cw:batch:b1:waiting",
    ("batch_failed", ("b1",)): "cw:batch:b1:failed",
    ("batch_jids", ("b1",)): "cw:batch:b1:jids",
    ("batch_results", ("b1",)): "cw:batch:b1:results",
    ("limit_leases", ("l",)): "cw:limit:l:leases",
    ("limit_starts", ("l",)): "cw:limit:l:starts",
    ("limit_waiting", ("l",)): "cw:limit:l:waiting",
    ("limit_offered", ("l",)): "cw:limit:l:offered",
    ("quarantine_prefix", ("cw:dead",)): "cw:quarantine:cw:dead:",
    ("quarantine", ("cw:dead", 5, "ab")): "cw:quarantine:cw:dead:5:ab",
}


def test_without_cluster_every_key_name_is_what_it_always_was(configure):
    configure(PREFIX="cw")
    for name, expected in PINNED.items():
        assert _built(name) == expected, name
    for (name, args), expected in PINNED_WITH_ARGS.items():
        assert _built(name, args) == expected, name
    # Every key function is pinned above (a new one must be added here, with its name).
    functions = {
        n
        for n, f in vars(keys).items()
        if callable(f) and getattr(f, "__module__", "") == keys.__name__ and not n.startswith("_")
    }
    helpers = {
        *("prefix", "root", "hash_tag", "fixed_types", "batch_keys", "limit_keys"),
        *("spread", "home_of", "home_part", "home_types", "is_quarantined"),
        *("glob_escape", "queue_of_home", "quarantine_patterns"),
    }
    assert functions - helpers == set(PINNED) | {n for n, _ in PINNED_WITH_ARGS}
    assert keys.root() == "cw"


def test_with_cluster_each_name_is_the_same_under_the_tag(configure, cluster_url):
    configure(PREFIX="cw")
    plain = {name: _built(name) for name in PINNED}
    plain_args = {(n, a): _built(n, a) for n, a in PINNED_WITH_ARGS if n != "quarantine"}
    configure(REDIS_URL=cluster_url, CLUSTER=True, PREFIX="{cw}")
    for name, before in plain.items():
        assert _built(name) == "{cw}" + before[len("cw") :], name
    for (name, args), before in plain_args.items():
        if name == "quarantine_prefix":
            continue  # names the key it copies, which has its own prefix
        assert _built(name, args) == "{cw}" + before[len("cw") :], name
    assert keys.quarantine(keys.dead(keys.root()), 5, "ab") == "{cw}:quarantine:{cw}:dead:5:ab"


def test_the_redis_checks_read_the_master_that_holds_the_jobs(configure, local_cluster):
    """maxmemory-policy, version and persistence are those of the master serving the
    prefix's slot: an evicting policy on it is reported, one on another master is not
    about the jobs."""
    configure(REDIS_URL=local_cluster.url, CLUSTER=True)
    client = connection.get_client()
    holder = cluster.data_node(client, keys.root())
    port = holder.connection_pool.connection_kwargs["port"]
    others = [p for p, role in local_cluster.nodes.items() if role == "master" and p != port]
    try:
        local_cluster.node(others[0]).config_set("maxmemory-policy", "allkeys-lru")
        assert "cogworker.W002" not in [m.id for m in checks.redis_messages()]
        local_cluster.node(port).config_set("maxmemory-policy", "allkeys-lru")
        assert connection.maxmemory_policy() == "allkeys-lru"
        assert "cogworker.W002" in [m.id for m in checks.redis_messages()]
        assert connection.server_version() >= (6, 2)
        local_cluster.node(others[0]).config_set("appendonly", "yes")
        assert RedisServer().persistence().none  # another master's AOF keeps no job
        local_cluster.node(port).config_set("appendonly", "yes")
        assert RedisServer().persistence().aof is True
    finally:
        for p in (port, *others):
            local_cluster.node(p).config_set("appendonly", "no")
        for p in (port, *others):
            local_cluster.node(p).config_set("maxmemory-policy", "noeviction")


def test_known_nodes_are_every_node_of_a_built_client_and_none_of_an_unbuilt_one(
    configure, local_cluster
):
    """What a new client of this process is seeded with (connection.new_client): every
    node the process's client learned; nothing, and no connection made, before it is
    built."""
    configure(REDIS_URL=local_cluster.url, CLUSTER=True)
    unbuilt = connection.new_client()
    assert cluster.known_nodes(unbuilt) == [] and unbuilt.built_or_none() is None
    assert cluster.known_nodes(object()) == []  # a plain client: nothing to learn
    connection.get_client().ping()
    learned = {node.port for node in cluster.known_nodes(connection.get_client())}
    assert learned == set(local_cluster.nodes)
    # (That a new client reaches the cluster with REDIS_URL's node dead through them:
    # test_store_workers.py, the master killed mid-drain.)


def test_a_forked_child_builds_its_own_cluster_client(configure, local_cluster):
    """--processes forks workers: a child must never share the parent's sockets."""
    configure(REDIS_URL=local_cluster.url, CLUSTER=True)
    assert forked_child_gets_its_own_client()


@pytest.fixture
def cluster_user(local_cluster):
    """A user ``cw`` (password ``right``) on every node of the session's cluster."""
    for port in local_cluster.nodes:
        local_cluster.node(port).execute_command(
            "ACL", "SETUSER", "cw", "on", ">right", "~*", "+@all"
        )
    yield
    for port in local_cluster.nodes:
        local_cluster.node(port).execute_command("ACL", "DELUSER", "cw")


def test_refused_credentials_are_said_so_not_unreachable(configure, local_cluster, cluster_user):
    port = next(iter(local_cluster.nodes))
    configure(REDIS_URL=f"redis://cw:wrong@127.0.0.1:{port}/0", CLUSTER=True)
    with pytest.raises(redis.AuthenticationError, match="refused the credentials"):
        connection.get_client().ping()
    [message] = checks.redis_messages()
    assert message.id == "cogworker.E002" and "refused cogworker's credentials" in message.msg
    assert "wrong" not in message.msg  # the password is masked
    configure(REDIS_URL=f"redis://cw:right@127.0.0.1:{port}/0")
    assert connection.get_client().ping() is True
