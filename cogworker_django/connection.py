"""The Redis client: from ``REDIS_URL``, a django-redis cache alias, or Sentinel.

One client (and so one connection pool) per process, rebuilt in a forked child.
Every connection has connect and socket timeouts, so no call hangs forever, and
redis-py's automatic retries are off (rule 11: a timed-out LMOVE, INCR or script
retried by the client could run twice); callers decide what to retry.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import conf

# Longer than any blocking command we issue (fetch blocks at most FETCH_BLOCK_SECONDS),
# so a blocked call always returns before its socket gives up on it (rule 11).
DEFAULT_SOCKET_TIMEOUT = 10.0
DEFAULT_CONNECT_TIMEOUT = 5.0
# The longest a fetch or subscriber blocks in Redis: short enough to notice shutdown.
FETCH_BLOCK_SECONDS = 1.0
# Newest Redis features we rely on: LMOVE (reliable fetch), GETDEL, ZADD GT.
MIN_REDIS_VERSION = (6, 2)

_lock = threading.Lock()
_client: redis.Redis | None = None
_client_pid: int | None = None


def _client_options(extra: dict | None = None) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 30,
    }
    opts.update(conf.get().REDIS_OPTIONS)
    if extra:
        opts.update(extra)
    # A None timeout would let a call hang forever: never allowed.
    for key in ("socket_timeout", "socket_connect_timeout"):
        if opts.get(key) is None:
            opts[key] = DEFAULT_SOCKET_TIMEOUT
    return opts


def _build() -> redis.Redis:
    s = conf.get()
    if s.CACHE_ALIAS:
        from django_redis import get_redis_connection

        return get_redis_connection(s.CACHE_ALIAS)
    if s.SENTINELS:
        from redis.sentinel import Sentinel

        sentinel_opts = {
            "socket_timeout": DEFAULT_CONNECT_TIMEOUT,
            "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
            **s.SENTINEL_OPTIONS,
        }
        sentinel = Sentinel(s.SENTINELS, sentinel_kwargs=sentinel_opts, **_sentinel_conn_opts())
        return sentinel.master_for(s.SENTINEL_MASTER, **_client_options())
    return redis.Redis.from_url(s.REDIS_URL, **_client_options())


def _sentinel_conn_opts() -> dict[str, Any]:
    opts = dict(conf.get().REDIS_OPTIONS)
    return {k: opts[k] for k in ("password", "username", "ssl") if k in opts}


def get_client() -> redis.Redis:
    """The process's client (created on first use; re-created after a fork)."""
    global _client, _client_pid
    client, pid = _client, os.getpid()
    if client is not None and _client_pid == pid:
        return client
    with _lock:
        if _client is None or _client_pid != pid:
            _client = _build()
            _client_pid = pid
        return _client


def new_client(**overrides: Any) -> redis.Redis:
    """A separate client with its own pool (the pub/sub subscriber uses one)."""
    s = conf.get()
    if s.CACHE_ALIAS or s.SENTINELS:
        return _build()
    return redis.Redis.from_url(s.REDIS_URL, **_client_options(overrides))


def reset() -> None:
    """Drop the client; the next :func:`get_client` builds a new one from the settings."""
    global _client, _client_pid
    with _lock:
        old, _client, _client_pid = _client, None, None
    if old is not None and not conf.get().CACHE_ALIAS:
        try:
            old.close()
        except Exception:  # noqa: BLE001 - closing a dead pool must not raise
            pass


def _after_fork_in_child() -> None:
    # The parent's sockets must never be shared with the child: forget them unclosed.
    global _client, _client_pid
    _client, _client_pid = None, None


os.register_at_fork(after_in_child=_after_fork_in_child)


def text(value: Any, errors: str = "replace") -> str:
    """A Redis reply (a name, a field, a counter) as text; not for raw payloads, which
    must round-trip byte for byte (worker/fetch.text)."""
    return value.decode("utf-8", errors) if isinstance(value, bytes) else str(value)


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


def describe_target() -> str:
    """Where we talk to, for log lines and system checks (password masked)."""
    s = conf.get()
    if s.CACHE_ALIAS:
        return f"cache alias {s.CACHE_ALIAS!r}"
    if s.SENTINELS:
        hosts = ",".join(f"{h}:{p}" for h, p in s.SENTINELS)
        return f"sentinel {s.SENTINEL_MASTER}@{hosts}"
    return mask_url(s.REDIS_URL)


def server_version(client: redis.Redis | None = None) -> tuple[int, ...]:
    info = (client or get_client()).info("server")
    return tuple(int(p) for p in str(info.get("redis_version", "0")).split(".")[:3] if p.isdigit())


def maxmemory_policy(client: redis.Redis | None = None) -> str | None:
    """From INFO (works where CONFIG is disabled, as on managed services)."""
    info = (client or get_client()).info("memory")
    policy = info.get("maxmemory_policy")
    return str(policy) if policy is not None else None
