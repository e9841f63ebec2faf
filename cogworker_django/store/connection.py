"""The Redis client: from ``REDIS_URL``, a django-redis cache alias, Sentinel, or a
Redis Cluster (``CLUSTER``: ``cluster.LazyCluster``, built on its first command).

(Over 400 lines: every way to reach Redis, and the held connection, share the timeout
and retry rules.)

One client (and so one connection pool) per process, held by its runtime (runtime.py),
rebuilt in a forked child.
Every connection has connect and socket timeouts, so no call hangs forever, and
redis-py's automatic retries are off (rule 11: a timed-out LMOVE, INCR or script
retried by the client could run twice); callers decide what to retry. Settings that
would change either are refused (``conf`` for ``REDIS_OPTIONS`` and the URL's query;
:func:`unsafe_options` here for whatever client was built, the cache's included).
"""

from __future__ import annotations

import socket
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from redis.backoff import NoBackoff
from redis.retry import Retry

from .. import conf
from . import cluster, codec, errors, keys, naming, runtime

# The timeouts (redis_checks.py: conf validates the settings against them).
from .redis_checks import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_SOCKET_TIMEOUT,
    FETCH_BLOCK_SECONDS,
    SOCKET_TIMEOUT_MARGIN,
    min_socket_timeout,
)

# Newest Redis features we rely on: LMOVE (reliable fetch), GETDEL, ZADD GT.
MIN_REDIS_VERSION = (6, 2)


def _client_options(extra: dict | None = None) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 30,
    }
    opts.update(conf.get().REDIS_OPTIONS)  # validated: no retries, no None timeouts
    opts.update(naming.options())  # a worker's name on its connections (naming.py)
    if extra:
        opts.update(extra)
    if opts.get("retry") is None:
        opts["retry"] = Retry(NoBackoff(), 0)
    return opts


def unsafe_options(client: Any) -> list[str]:
    """What makes ``client`` unfit for jobs: automatic retries on, or a socket timeout
    that is none or too short for a blocking fetch. Empty when it is fit.

    Read from a connection object made (not connected) from the client's own pool
    settings, so redis-py's defaults and any URL query options count exactly as they
    would on a real connection.
    """
    if isinstance(client, cluster.LazyCluster):
        client = client.probe  # the same URL and options, never connected
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if pool is None or not isinstance(kwargs, dict):
        return []  # not a redis-py client we can read (a cluster client, say)
    try:
        conn = pool.connection_class(**kwargs)
    except Exception:  # noqa: BLE001 - settings a connection can't take fail on first use
        return []
    found: list[str] = []
    timeout = getattr(conn, "socket_timeout", None)
    if timeout is None:
        found.append("its socket_timeout is None (a call can hang forever)")
    elif timeout < min_socket_timeout():
        found.append(
            f"its socket_timeout is {timeout:g} s, not longer than a blocking fetch waits "
            f"in Redis ({FETCH_BLOCK_SECONDS:g} s) plus {SOCKET_TIMEOUT_MARGIN:g} s"
        )
    retry = getattr(conn, "retry", None)
    retries = retry.get_retries() if retry is not None else 0
    if retries != 0:
        kinds = ", ".join(sorted({e.__name__ for e in getattr(retry, "_supported_errors", ())}))
        count = "without limit" if retries < 0 else f"up to {retries} time(s)"
        found.append(
            f"it re-sends a failed command automatically, {count}"
            + (f" on {kinds}" if kinds else "")
            + " (a timed-out command may have run: re-sent, it can queue a job twice, "
            "lose a fetched job or skip a periodic slot)"
        )
    return found


_OWN_FIX = "Check COGWORKER['REDIS_OPTIONS'] and the query string of COGWORKER['REDIS_URL']."


def _refuse_unsafe(client: Any, where: str, fix: str) -> None:
    found = unsafe_options(client)
    if found:
        raise ImproperlyConfigured(
            f"The Redis client of {where} is unfit for jobs: " + "; ".join(found) + f". {fix}"
        )


def _cache_client(alias: str) -> redis.Redis:
    where = f"CACHES[{alias!r}] (COGWORKER['CACHE_ALIAS'])"
    try:
        from django_redis import get_redis_connection
    except ImportError:
        raise ImproperlyConfigured(
            f"COGWORKER['CACHE_ALIAS'] = {alias!r} needs django-redis, which is not "
            "installed: pip install 'cogworker-django[cache]' (or django-redis), or set "
            "COGWORKER['REDIS_URL'] instead."
        ) from None
    try:
        client = get_redis_connection(alias)
    except Exception as exc:  # noqa: BLE001 - a missing alias or a cache that isn't django-redis
        raise ImproperlyConfigured(
            f"COGWORKER['CACHE_ALIAS'] = {alias!r} is invalid: expected the alias of a "
            f"django-redis cache in CACHES ({errors.describe(exc)})."
        ) from None
    _refuse_unsafe(
        client,
        where,
        f"Set CACHES[{alias!r}]['OPTIONS']['SOCKET_TIMEOUT'] to {min_socket_timeout():g} "
        f"or more ({DEFAULT_SOCKET_TIMEOUT:g} is a good value), and leave 'retry', "
        f"'retry_on_timeout' and 'retry_on_error' out of its CONNECTION_POOL_KWARGS and of "
        "its LOCATION's query string.",
    )
    return client


def _build() -> Any:  # a redis.Redis, or a cluster.LazyCluster
    s = conf.get()
    if s.CACHE_ALIAS:
        return _cache_client(s.CACHE_ALIAS)
    client = _build_own()
    # conf refused bad REDIS_OPTIONS and URL options already; this catches the rest.
    _refuse_unsafe(client, describe_target(), _OWN_FIX)
    return client


def _build_own() -> Any:
    s = conf.get()
    if s.SENTINELS:
        from redis.sentinel import Sentinel

        sentinel_opts = {
            "socket_timeout": DEFAULT_CONNECT_TIMEOUT,
            "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
            **s.SENTINEL_OPTIONS,
        }
        sentinel = Sentinel(s.SENTINELS, sentinel_kwargs=sentinel_opts, **_sentinel_conn_opts())
        master = s.SENTINEL_MASTER
        assert master is not None  # conf refuses SENTINELS without it
        return sentinel.master_for(master, **_client_options())
    if s.CLUSTER:
        return _cluster_client()
    return redis.Redis.from_url(s.REDIS_URL, **_client_options())


def _cluster_client(extra: dict | None = None, seeded: bool = False) -> cluster.LazyCluster:
    """``seeded``: a second client of this process (new_client) starts from the nodes the
    process's own client has learned as well as REDIS_URL's, read when it is built."""
    url, opts, where = conf.get().REDIS_URL, _client_options(extra), describe_target()
    # The probe: a plain client of the same URL and options, never connected, for
    # unsafe_options and longest_call to read (a node's connections get these options;
    # the cluster client's own retry is opts["retry"], no retries: rule 11).
    probe = redis.Redis.from_url(url, **opts)

    def factory() -> Any:
        return cluster.build(url, opts, where, _learned_nodes() if seeded else None)

    return cluster.LazyCluster(factory, probe)


def _learned_nodes() -> list[Any]:
    """The nodes this process's own client has learned ([] before it is built here)."""
    client = runtime.current().built_client()
    return [] if client is None else cluster.known_nodes(client)


def _sentinel_conn_opts() -> dict[str, Any]:
    opts = dict(conf.get().REDIS_OPTIONS)
    return {k: opts[k] for k in ("password", "username", "ssl") if k in opts}


# get_client and new_client return Any: redis-py's types make every reply a union of the
# sync value and an Awaitable (one Redis class serves both), which no caller can use.
def get_client() -> Any:
    """The process's client (created on first use; re-created after a fork)."""
    return runtime.current().client(_build)


def new_client(**overrides: Any) -> Any:
    """A separate client with its own pool (the pub/sub subscriber uses one)."""
    s = conf.get()
    if s.CACHE_ALIAS or s.SENTINELS:
        return _build()
    client = (
        _cluster_client(overrides, seeded=True)
        if s.CLUSTER
        else redis.Redis.from_url(s.REDIS_URL, **_client_options(overrides))
    )
    _refuse_unsafe(client, describe_target(), _OWN_FIX)
    return client


def reset() -> None:
    """Drop the client; the next :func:`get_client` builds a new one from the settings."""
    close(runtime.current().drop_client())


def close(client: Any) -> None:
    """Close a client this package built (a django-redis cache's is the cache's own)."""
    if client is not None and not conf.get().CACHE_ALIAS:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - closing a dead pool must not raise
            pass


def longest_call() -> float:
    """The longest one call can take (a fetch at shutdown, say): the client's socket
    timeout (a reply that never comes) plus a connect, plus a second;
    FETCH_BLOCK_SECONDS + 1 at least."""
    client = get_client()
    if isinstance(client, cluster.LazyCluster):
        client = client.probe  # the nodes' options, without connecting
    pool: Any = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", {})
    total = 1.0
    for key, default in (
        ("socket_timeout", DEFAULT_SOCKET_TIMEOUT),
        ("socket_connect_timeout", DEFAULT_CONNECT_TIMEOUT),
    ):
        value = kwargs.get(key, default) if isinstance(kwargs, dict) else default
        total += float(value) if isinstance(value, int | float) and value > 0 else default
    return max(total, FETCH_BLOCK_SECONDS + 1.0)


class Held:
    """One connection of the process's client, held by one thread for its own commands
    (reliable fetch's feeder: a fetch every round trip). Each command skips what the
    client does around it for a thread that shares the pool (a checkout, its check
    that the connection has nothing unread, the release), which is a good part of the
    CPU of a small command. The connection is the pool's, with its options (timeouts,
    health checks, no retries); one that failed is dropped and the next command takes
    a fresh one. It follows :func:`get_client`: a client rebuilt (new settings, a fork)
    is picked up on the next command. A cluster client (or one without a pool) is used
    as it is: it routes each command itself.

    It offers what :class:`scripts.Script` calls: ``evalsha`` and ``script_load``."""

    def __init__(self) -> None:
        self._client: Any = None
        self._pool: Any = None
        self._conn: Any = None
        # (monotonic) When the connection in use, or the last one, was taken from the
        # pool (checked by it then); None while the client routes each command itself.
        self.opened_at: float | None = None

    def _current(self) -> Any:
        """The process's client now (and its pool, None for a cluster client)."""
        client = get_client()
        if client is not self._client:
            self.close()
            self._pool = (
                None if cluster.is_cluster(client) else getattr(client, "connection_pool", None)
            )
            self._client = client
            self.opened_at = None
        return client

    def execute_command(self, *args: Any) -> Any:
        client = self._current()
        if self._pool is None:
            return client.execute_command(*args)
        conn = self._conn
        if conn is None:
            conn = self._conn = self._pool.get_connection()
            self.opened_at = time.monotonic()
        try:
            conn.send_command(*args)
            return conn.read_response()
        except redis.ResponseError:
            raise  # an error reply: the connection is in step, keep it
        except BaseException:
            self.close()  # a dropped or timed-out connection: never reused mid-reply
            raise

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        client = self._current()
        if self._pool is None:  # the cluster client routes it by its keys
            return client.evalsha(sha, numkeys, *keys_and_args)
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)

    def script_load(self, source: str) -> Any:
        client = self._current()
        if self._pool is None:  # the cluster client loads it where it must
            return client.script_load(source)
        return self.execute_command("SCRIPT", "LOAD", source)

    def interrupt(self) -> None:
        """From another thread: end a blocking command this connection is waiting in
        (the idle feeder's BRPOP on the doorbells, dispatch.py) now. The socket is shut
        down, so the read returns at once and raises; the connection is then dropped and
        the next command takes a fresh one. A cluster client's connections are its own:
        there the wait runs to its timeout."""
        sock = getattr(self._conn, "_sock", None)
        if sock is None:
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed meanwhile: nothing waits on it

    def close(self) -> None:
        conn, pool, self._conn = self._conn, self._pool, None
        if conn is not None and pool is not None:
            try:
                conn.disconnect()
                pool.release(conn)
            except Exception:  # noqa: BLE001 - a pool closed meanwhile: nothing to give back
                pass


# A Redis reply as text (codec.reply_text; raw payloads use codec.raw_text).
text = codec.reply_text


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def parser_name() -> str:
    """Which reply parser redis-py uses by default in this process: "hiredis" (its C
    parser, a dependency: docs/performance.md) or "python" (no wheel for this platform,
    or hiredis not importable). For the worker's start line."""
    from redis.utils import HIREDIS_AVAILABLE

    return "hiredis" if HIREDIS_AVAILABLE else "python"


def describe_target() -> str:
    """Where we talk to, for log lines and system checks (password masked)."""
    s = conf.get()
    if s.CACHE_ALIAS:
        return f"cache alias {s.CACHE_ALIAS!r}"
    if s.SENTINELS:
        hosts = ",".join(f"{h}:{p}" for h, p in s.SENTINELS)
        return f"sentinel {s.SENTINEL_MASTER}@{hosts}"
    if s.CLUSTER:
        return f"cluster {mask_url(s.REDIS_URL)}"
    return mask_url(s.REDIS_URL)


def _info(client: Any, section: str) -> dict[str, Any]:
    """INFO of the server that holds the jobs: on a cluster, the master of the slot every
    key of the prefix hashes to (cluster.data_node), not whichever node redis-py picks."""
    client = client or get_client()
    if cluster.is_cluster(client):
        client = cluster.data_node(client, keys.root())
    return dict(client.info(section))


def server_version(client: redis.Redis | None = None) -> tuple[int, ...]:
    info = _info(client, "server")
    return tuple(int(p) for p in str(info.get("redis_version", "0")).split(".")[:3] if p.isdigit())


def maxmemory_policy(client: redis.Redis | None = None) -> str | None:
    """From INFO (works where CONFIG is disabled, as on managed services)."""
    info = _info(client, "memory")
    policy = info.get("maxmemory_policy")
    return str(policy) if policy is not None else None


def _on_setting_changed(*, setting: str, **_kwargs: Any) -> None:
    # The client is built from these settings: rebuilt on next use when they change.
    if setting in ("COGWORKER", "CACHES"):
        reset()


setting_changed.connect(_on_setting_changed, dispatch_uid="cogworker_django.store.connection")
