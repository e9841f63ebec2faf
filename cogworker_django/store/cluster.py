"""The Redis Cluster client (``COGWORKER["CLUSTER"] = True``, docs/cluster.md).

redis-py's ``RedisCluster`` connects in its constructor (it reads the slot map from the
first node that answers), so a cluster that is down when the client is first wanted
would make ``connection.get_client()`` raise wherever it is called, often outside the
caller's ``try``. :class:`LazyCluster` builds it on the first command instead and, until
it is built, turns that failure into a ``redis.ConnectionError``: an outage like any
other (rule 5), met inside the caller's error handling. Once built, redis-py follows the
cluster by itself: a connection error or ``CLUSTERDOWN`` reloads the slot map, a
``MOVED`` patches it, so a worker reconnects to a promoted replica with no help.

Automatic retries stay off (rule 11) at both levels: the cluster client's own ``retry``
(which would re-send a timed-out command to the new master) and each node's
connections (redis-py sets those to none itself). Redirections (``MOVED``, ``ASK``,
``TRYAGAIN``) are still followed: a redirected command did not run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis
from django.core.exceptions import ImproperlyConfigured
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.exceptions import RedisClusterException

from . import errors

SLOTS = 16384

_NOT_A_CLUSTER = "Cluster mode is not enabled"
# What redis-py's constructor says (inside its "cannot be connected") when the nodes
# answered and refused the credentials: not an outage, and the check says so.
_REFUSED = ("invalid username-password", "wrongpass", "noauth", "authentication required", "noperm")


class NotACluster(errors.CogworkerError, ImproperlyConfigured):
    """COGWORKER["CLUSTER"] is on but the server at REDIS_URL is a plain Redis (a bad
    setting, so also Django's ImproperlyConfigured)."""


def build(
    url: str, options: dict[str, Any], where: str, seeds: list[ClusterNode] | None = None
) -> RedisCluster:
    """A connected ``RedisCluster`` from ``url`` (any node), and first from ``seeds``
    (nodes already known, see :func:`known_nodes`): ``NotACluster`` when the node answers
    without cluster mode, ``redis.AuthenticationError`` when it refuses the credentials,
    ``redis.ConnectionError`` when no node answers."""
    try:
        # redis-py appends the URL's node to the startup nodes given.
        return RedisCluster.from_url(url, startup_nodes=list(seeds or ()), **options)
    except RedisClusterException as exc:
        text = errors.safe_str(exc)
        if _NOT_A_CLUSTER in text:
            raise NotACluster(
                f"COGWORKER['CLUSTER'] is True but the Redis at {where} is not a cluster node "
                "(cluster mode is not enabled on it). Set CLUSTER to False for a single Redis, "
                "or point REDIS_URL at a node of the cluster."
            ) from None
        if any(marker in text.lower() for marker in _REFUSED):
            raise redis.AuthenticationError(
                f"Redis Cluster at {where} refused the credentials: {text}"
            ) from exc
        # The constructor's "cannot be connected" wraps what each node said: an outage.
        raise redis.ConnectionError(f"Redis Cluster at {where} cannot be reached: {text}") from exc


class Pipeline(ClusterPipeline):
    """redis-py's cluster pipeline refuses some commands outright (TIME, MGET, PUBLISH,
    EVALSHA, a DEL of several keys: it can't know they are safe in general); ours are:
    every key of this package hashes to one slot (keys.root), and a keyless TIME or
    PUBLISH may go to any node. Sent as raw commands, the pipeline routes them by their
    first key (a script's by its first KEYS entry), or anywhere."""

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)

    def delete(self, *names: Any) -> Any:
        return self.execute_command("DEL", *names)

    def unlink(self, *names: Any) -> Any:
        return self.execute_command("UNLINK", *names)

    def time(self, **kwargs: Any) -> Any:
        return self.execute_command("TIME", **kwargs)

    def mget(self, keys: Any, *args: Any) -> Any:
        names = [keys] if isinstance(keys, str | bytes) else list(keys)
        return self.execute_command("MGET", *names, *args)

    def publish(self, channel: Any, message: Any, **kwargs: Any) -> Any:
        return self.execute_command("PUBLISH", channel, message, **kwargs)


class LazyCluster:
    """A ``RedisCluster`` built on first use (see the module's docstring); every attribute
    is the built client's."""

    def __init__(self, factory: Callable[[], RedisCluster], probe: redis.Redis) -> None:
        self._factory = factory
        # A plain client of the same URL and options, never connected: what the checks
        # of connection.unsafe_options read (a node's connections get the same options).
        self.probe = probe
        self._client: RedisCluster | None = None
        self._lock = threading.Lock()

    def built(self) -> RedisCluster:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._factory()
                client = self._client
        return client

    def built_or_none(self) -> RedisCluster | None:
        """The client if it was built, without building it (which would connect)."""
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def pipeline(self, transaction: bool | None = None, shard_hint: Any = None) -> Pipeline:
        pipe = self.built().pipeline(transaction=transaction, shard_hint=shard_hint)
        # The same object with the three commands above let through (see Pipeline); a
        # subclass built directly would have to copy redis-py's constructor arguments.
        pipe.__class__ = Pipeline
        return pipe

    def __getattr__(self, name: str) -> Any:
        # Only names this class lacks land here: commands, pipeline(), pubsub(), ...
        return getattr(self.built(), name)

    def __repr__(self) -> str:
        return f"<LazyCluster {'built' if self._client is not None else 'not built'}>"


def known_nodes(client: Any) -> list[ClusterNode]:
    """Every node a built client has learned (masters and replicas), as startup nodes for a
    new client: REDIS_URL names one node, and after a failover that node may be the dead
    master, so a client seeded with it alone could never find the cluster again (the
    signal subscriber builds a new client at each reconnect). [] for a client not built
    yet (building it here would connect)."""
    real = client.built_or_none() if isinstance(client, LazyCluster) else client
    if not isinstance(real, RedisCluster):
        return []
    return [ClusterNode(node.host, node.port) for node in real.get_nodes()]


def is_cluster(client: Any) -> bool:
    return isinstance(client, LazyCluster | RedisCluster)


def masters(client: Any) -> list[Any]:
    """The cluster's masters (redis-py ``ClusterNode``s) as its slot map says now."""
    real = client.built() if isinstance(client, LazyCluster) else client
    return list(real.get_primaries())


def data_node(client: Any, key: str) -> redis.Redis:
    """A client of the master serving ``key``'s slot now (for INFO about that server)."""
    real = client.built() if isinstance(client, LazyCluster) else client
    node = real.get_node_from_key(key)
    return real.get_redis_connection(node)


def node_client(client: Any, node: Any) -> redis.Redis:
    """A client of one node (a ``ClusterNode``), for a command meant for that node alone."""
    real = client.built() if isinstance(client, LazyCluster) else client
    return real.get_redis_connection(node)


def describe(client: Any) -> str:
    """ "3 masters, 3 replicas, all 16384 slots served" (talks to the cluster)."""
    real = client.built() if isinstance(client, LazyCluster) else client
    info: dict[str, Any] = dict(real.cluster_info())
    if "cluster_state" not in info:
        info = dict(next(iter(info.values()), {}))  # one reply per node in some versions
    replicas = len(real.get_replicas())
    served = int(info.get("cluster_slots_ok", 0))
    count = len(masters(real))
    text = f"{count} master{'s' if count != 1 else ''}, {replicas} replica{'s' if replicas != 1 else ''}"
    if served >= SLOTS and info.get("cluster_state") == "ok":
        return text + f", all {SLOTS} slots served"
    return text + f", {served} of {SLOTS} slots served (cluster_state {info.get('cluster_state')})"
