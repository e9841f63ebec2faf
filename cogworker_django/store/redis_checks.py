"""The Redis client's settings checks (rule 11, docs/internals.md): the timeouts every
connection gets, the options that would turn redis-py's automatic retries on or let a
call hang (in ``REDIS_OPTIONS`` or in ``REDIS_URL``'s query string), the URL schemes, what
a Redis Cluster's URL and prefix must be, the Sentinel list. ``conf`` declares the
settings and calls these; ``store/connection.py`` reads the same timeouts. Imports nothing
of the package (``conf`` imports it)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.core.exceptions import ImproperlyConfigured


def bad(key: str, value: Any, allowed: str) -> ImproperlyConfigured:
    """As ``conf``'s: the key, the value, what is allowed."""
    return ImproperlyConfigured(f"COGWORKER[{key!r}] = {value!r} is invalid: {allowed}.")


# Automatic retries and timeouts of the Redis client (rule 11). A command that timed out
# may have run: re-sent by the client, a push queues its job twice, a BRPOP whose reply
# was lost takes a second job, and a periodic claim reads its own first claim as "taken"
# (the slot is never pushed). Callers decide what to retry, so retries stay off; and the
# socket must wait longer than any command that blocks in Redis, or a fetch that found a
# job is cut off before its reply arrives.
WHY_NO_RETRIES = (
    "automatic retries must stay off: a command that timed out may have run, and re-sent "
    "it can queue a job twice, lose a fetched job or skip a periodic slot"
)


# Longer than any blocking command we issue (fetch blocks at most FETCH_BLOCK_SECONDS),
# so a blocked call always returns before its socket gives up on it (rule 11).
DEFAULT_SOCKET_TIMEOUT = 10.0
DEFAULT_CONNECT_TIMEOUT = 5.0
# The longest a fetch or subscriber blocks in Redis: short enough to notice shutdown.
FETCH_BLOCK_SECONDS = 1.0
# A socket timeout must exceed FETCH_BLOCK_SECONDS by this much at least (the reply of a
# blocked command that found a job still has to travel back and be read).
SOCKET_TIMEOUT_MARGIN = 0.5


def min_socket_timeout() -> float:
    """The shortest ``socket_timeout`` allowed: a blocking fetch's own timeout plus a
    margin for its reply to travel back on a busy machine."""
    return FETCH_BLOCK_SECONDS + SOCKET_TIMEOUT_MARGIN


def socket_timeout_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not a usable timeout (None when it is)."""
    if value is None:
        return "a call could hang forever; expected a number of seconds"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return "expected a number of seconds"
    if name == "socket_timeout" and value < min_socket_timeout():
        return (
            f"must be at least {min_socket_timeout():g} s, longer than a blocking fetch "
            f"waits in Redis ({FETCH_BLOCK_SECONDS:g} s), or a fetch that found a job can "
            f"time out before its reply arrives (default {DEFAULT_SOCKET_TIMEOUT:g})"
        )
    if value <= 0:
        return "must be > 0"
    return None


def _retries_of(retry: Any) -> int | None:
    try:
        return int(retry.get_retries())
    except Exception:  # noqa: BLE001 - not a redis-py Retry
        return None


def check_redis_options(options: dict) -> None:
    """Refuse client options that would turn automatic retries on or let a call hang."""

    def bad(option: str, value: Any, why: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(
            f"COGWORKER['REDIS_OPTIONS'][{option!r}] = {value!r} is invalid: {why}."
        )

    if "connection_pool" in options:
        raise bad(
            "connection_pool",
            options["connection_pool"],
            "a pool built elsewhere bypasses the timeouts and retry settings cogworker "
            "enforces; pass its options (socket_timeout, ssl, ...) here instead",
        )
    if "retry" in options and options["retry"] is not None:
        retry = options["retry"]
        retries = _retries_of(retry)
        if retries != 0:
            shown = "a Retry object" if retries is None else f"Retry with {retries} retries"
            raise ImproperlyConfigured(
                f"COGWORKER['REDIS_OPTIONS']['retry'] = {shown} is invalid: {WHY_NO_RETRIES}; "
                "leave it out (or pass Retry(NoBackoff(), 0))."
            )
    for option in ("retry_on_timeout", "retry_on_error"):
        if options.get(option):
            raise bad(option, options[option], f"{WHY_NO_RETRIES}; leave it out")
    for option in ("socket_timeout", "socket_connect_timeout"):
        if option in options:
            why = socket_timeout_problem(option, options[option])
            if why:
                raise bad(option, options[option], why)


def check_url_query(url: str) -> None:
    """The same rules for options given in the URL's query string (redis-py reads
    ``?socket_timeout=...&retry_on_timeout=...`` and lets them win over keyword arguments)."""
    try:
        query = parse_qs(urlsplit(url).query)
    except ValueError:
        return  # an unparseable URL is refused by redis-py with its own message
    for option, values in query.items():
        value = values[-1] if values else ""
        why = None
        if option in ("retry_on_timeout", "retry_on_error"):
            off = value.strip().upper() in ("", "0", "F", "FALSE", "N", "NO")
            if option == "retry_on_error" or not off:
                why = f"{WHY_NO_RETRIES}; leave it out"
        elif option in ("socket_timeout", "socket_connect_timeout"):
            try:
                number: Any = float(value)
            except ValueError:
                number = value
            why = socket_timeout_problem(option, number)
        if why:
            raise ImproperlyConfigured(
                f"COGWORKER['REDIS_URL'] sets {option}={value} in its query string, which is "
                f"invalid: {why}."
            )


# What redis-py's from_url understands.
URL_SCHEMES = ("redis", "rediss", "unix")


def check_cluster_prefix(key: str, prefix: Any) -> None:
    if isinstance(prefix, str) and ("{" in prefix or "}" in prefix):
        opened, closed = prefix.find("{"), prefix.find("}")
        if not (prefix.count("{") == prefix.count("}") == 1 and opened + 1 < closed):
            raise bad(
                key,
                prefix,
                f"with CLUSTER on, a {key} may hold one hash tag such as '{{cogworker}}' (then "
                "used as it is) or no braces at all (then each queue gets its own tag)",
            )
    elif isinstance(prefix, str) and "|" in prefix:
        # keys.home_of: a queue's tag is "{PREFIX|queue}"; a "|" in the prefix could make
        # two prefixes' homes one and the same.
        raise bad(
            key,
            prefix,
            f"with CLUSTER on, a {key} without braces may not contain '|' (it separates the "
            "prefix from the queue in each queue's hash tag)",
        )


def check_sentinels(sentinels: Any, master: Any) -> list[tuple[Any, ...]] | None:
    """SENTINELS as (host, port) tuples, and the master's name they need; None: none."""
    if sentinels is None:
        return None
    ok = (
        isinstance(sentinels, (list, tuple))
        and sentinels
        and all(
            isinstance(s, (list, tuple))
            and len(s) == 2
            and isinstance(s[0], str)
            and isinstance(s[1], int)
            for s in sentinels
        )
    )
    if not ok:
        raise bad("SENTINELS", sentinels, 'expected a list of ("host", port) pairs')
    if not isinstance(master, str) or not master:
        raise bad("SENTINEL_MASTER", master, "the master's name is required when SENTINELS is set")
    return [tuple(s) for s in sentinels]


def check_redis_url(key: str, url: Any) -> str:
    if not isinstance(url, str) or "://" not in url:
        raise bad(key, url, "expected a URL such as redis://host:6379/0")
    scheme = url.partition("://")[0].lower()
    if scheme not in URL_SCHEMES:
        raise bad(
            key,
            url,
            f"the scheme {scheme + '://'!r} is not one Redis clients understand; expected "
            + ", ".join(f"{s}://" for s in URL_SCHEMES),
        )
    check_url_query(url)
    return url


def check_cluster_url(key: str, url: str) -> None:
    """A Redis Cluster is reached over TCP, on database 0 (it has no other)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("redis", "rediss"):
        raise bad(key, url, "a Redis Cluster is reached over TCP (redis:// or rediss://)")
    db = parts.path.strip("/") or parse_qs(parts.query).get("db", ["0"])[0]
    if db not in ("", "0"):
        raise bad(key, url, "a Redis Cluster has database 0 only (end the URL with /0)")
