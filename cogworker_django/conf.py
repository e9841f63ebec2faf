"""The ``COGWORKER`` and ``COGWORKER_PERIODIC`` settings.

(Longer than the package's other modules on purpose: every setting is validated here,
in one place, so each error names the key, the value and what is allowed the same way.)

Read lazily through :func:`get` on every use (never at import time), so
``override_settings`` works in tests; the validated result is cached until
Django's ``setting_changed`` signal says the settings moved. A bad value raises
``ImproperlyConfigured`` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import inspect
import math
import re
import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

# Defaults of API.md, plus the internal timings documented in docs/configuration.md
# (tests shorten them; production rarely needs to).
DEFAULTS: dict[str, Any] = {
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "REDIS_OPTIONS": {},
    "CACHE_ALIAS": None,
    "SENTINELS": None,
    "SENTINEL_MASTER": None,
    "SENTINEL_OPTIONS": {},
    "PREFIX": "cogworker",
    # Redis Cluster (docs/cluster.md): REDIS_URL names any node; keys carry a hash tag.
    "CLUSTER": False,
    "CONCURRENCY": 10,
    # async def jobs at once per process, on its event loop (besides the CONCURRENCY threads).
    "ASYNC_CONCURRENCY": 100,
    "QUEUES": ["default"],
    "FETCH": "reliable",
    "SHUTDOWN_TIMEOUT": 25,
    "ORPHAN_THRESHOLD": 300,
    "MAX_ORPHANINGS": 3,
    "FETCH_IDLE_MAX_INTERVAL": 1.0,
    "UNIQUE_LOCK_TTL": 86400,
    # Seconds a while_executing job waits before trying again when another run holds its lock.
    "UNIQUE_RESCHEDULE_DELAY": 5.0,
    "PERIODIC_CATCH_UP": False,
    "DEAD_MAX_JOBS": 10000,
    "DEAD_TIMEOUT": 180 * 86400,
    "HISTORY_MAX_RUNS": 100000,
    "RESULT_TTL": 86400,
    # Workflows: how long a batch stays in Redis once on_success has fired, and how long
    # an unfinished one stays after its last activity.
    "BATCH_TTL": 7 * 86400,
    "BATCH_UNFINISHED_TTL": 30 * 86400,
    # The largest job payload (JSON, in bytes) an enqueue accepts.
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    "ENQUEUE_ON_COMMIT": False,
    # Every enqueue writes an outbox row in the caller's transaction (docs/jobs.md).
    "ENQUEUE_DURABLE": False,
    "MIDDLEWARE": {"client": [], "server": []},
    "TESTING": None,
    # Job controls (docs/controls.md): fleet-wide limiters by name, and the time limit of
    # jobs that set none (None: no limit).
    "LIMITS": {},
    "DEFAULT_TIMEOUT": None,
    # Internal timings (seconds). Documented; tests shorten them.
    "HEARTBEAT_INTERVAL": 5.0,
    "POLL_INTERVAL": 5.0,
    "ORPHAN_CHECK_INTERVAL": 60.0,
    "KEYGUARD_INTERVAL": 60.0,
    "PERIODIC_TICK": 5.0,
    # How long an until_executed periodic run's lock outlives its last heartbeat refresh.
    "PERIODIC_ACTIVE_TTL": 60.0,
    # After a timeout (or a cancel's interruption) is raised, how long a job stuck in a C
    # call gets before its thread is abandoned and the job filed; and how long a
    # cancelled job gets to notice cancelled() before the worker interrupts it.
    "TIMEOUT_GRACE": 10.0,
    "CANCEL_GRACE": 5.0,
    "RETRY_BACKOFF": None,  # dotted path to f(retry_count) -> seconds; None = built-in formula
    "HISTORY": True,
    # Observability (docs/observability.md): the worker's /metrics port, the bearer token
    # both metrics endpoints want, OpenTelemetry traces across enqueue and run.
    "METRICS_PORT": None,
    "METRICS_TOKEN": None,
    "OTEL": False,
    # More modules a worker imports at start for their @job functions, besides the jobs
    # and tasks modules of installed apps (jobs.import_job_modules).
    "JOB_MODULES": [],
}

FETCH_MODES = ("reliable", "basic")
# None: "fake" in a test run, else Redis (testrun.py); "redis": Redis even in a test run.
TESTING_MODES = (None, "fake", "inline", "redis")
# The modes in which nothing talks to Redis (the client and Redis checks skip them).
LOCAL_MODES = ("fake", "inline")


@dataclass(frozen=True)
class QueueSpec:
    name: str
    weight: int


@dataclass(frozen=True)
class Settings:
    """The validated ``COGWORKER`` setting. Attribute names are the setting keys."""

    REDIS_URL: str
    REDIS_OPTIONS: dict
    CACHE_ALIAS: str | None
    SENTINELS: list | None
    SENTINEL_MASTER: str | None
    SENTINEL_OPTIONS: dict
    PREFIX: str
    CLUSTER: bool
    CONCURRENCY: int
    ASYNC_CONCURRENCY: int
    QUEUES: tuple[QueueSpec, ...]
    FETCH: str
    SHUTDOWN_TIMEOUT: float
    ORPHAN_THRESHOLD: float
    MAX_ORPHANINGS: int
    FETCH_IDLE_MAX_INTERVAL: float
    UNIQUE_LOCK_TTL: int
    UNIQUE_RESCHEDULE_DELAY: float
    PERIODIC_CATCH_UP: bool
    DEAD_MAX_JOBS: int
    DEAD_TIMEOUT: float
    HISTORY_MAX_RUNS: int
    RESULT_TTL: int
    BATCH_TTL: int
    BATCH_UNFINISHED_TTL: int
    MAX_PAYLOAD_BYTES: int
    ENQUEUE_ON_COMMIT: bool
    ENQUEUE_DURABLE: bool
    MIDDLEWARE: dict
    TESTING: str | None
    LIMITS: dict
    DEFAULT_TIMEOUT: float | None
    TIMEOUT_GRACE: float
    CANCEL_GRACE: float
    HEARTBEAT_INTERVAL: float
    POLL_INTERVAL: float
    ORPHAN_CHECK_INTERVAL: float
    KEYGUARD_INTERVAL: float
    PERIODIC_TICK: float
    PERIODIC_ACTIVE_TTL: float
    RETRY_BACKOFF: str | None
    HISTORY: bool
    METRICS_PORT: int | None
    METRICS_TOKEN: str | None
    OTEL: bool
    JOB_MODULES: tuple[str, ...]
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def queue_names(self) -> list[str]:
        """Distinct queue names in configured order."""
        return list(dict.fromkeys(q.name for q in self.QUEUES))


def _bad(key: str, value: Any, allowed: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"COGWORKER[{key!r}] = {value!r} is invalid: {allowed}.")


# Every number the package takes from its user, with its allowed range, in one table:
# the settings, a limiter's fields, the job options and limit()'s wait. A number is
# finite and in range; NaN (which every comparison lets through) and inf never are.
# docs/configuration.md lists the same ranges.
DAY = 86400
YEAR = 365 * DAY


@dataclass(frozen=True)
class Bound:
    """An allowed range: ``low`` < value (``open``) or ``low`` <= value, value <= ``high``."""

    integer: bool
    low: float
    high: float
    open: bool = False


def _seconds(low: float, high: float, *, open: bool = True) -> Bound:
    """A number of seconds > ``low`` (``open``: the default) or >= it, and <= ``high``."""
    return Bound(False, low, high, open)


def _count(low: int, high: int, *, open: bool = True) -> Bound:
    """An integer > ``low`` (``open``: the default; ``_count(0, ...)`` is a positive
    count) or >= it, and <= ``high``."""
    return Bound(True, low, high, open)


NUMBERS: dict[str, Bound] = {
    # COGWORKER's keys
    "CONCURRENCY": _count(0, 10_000),
    "ASYNC_CONCURRENCY": _count(0, 100_000),
    "SHUTDOWN_TIMEOUT": _seconds(0, DAY, open=False),
    "ORPHAN_THRESHOLD": _seconds(0, 7 * DAY),
    "MAX_ORPHANINGS": _count(0, 1_000),
    "FETCH_IDLE_MAX_INTERVAL": _seconds(0, 60),
    "UNIQUE_LOCK_TTL": _count(0, 10 * YEAR),
    "UNIQUE_RESCHEDULE_DELAY": _seconds(0, DAY),
    "DEAD_MAX_JOBS": _count(0, 10**9, open=False),
    "DEAD_TIMEOUT": _seconds(0, 10 * YEAR),
    "HISTORY_MAX_RUNS": _count(0, 10**9, open=False),
    "RESULT_TTL": _count(0, 10 * YEAR),
    "BATCH_TTL": _count(0, 10 * YEAR),
    "BATCH_UNFINISHED_TTL": _count(0, 10 * YEAR),
    "MAX_PAYLOAD_BYTES": _count(0, 512 * 1024 * 1024),  # Redis's largest string
    "DEFAULT_TIMEOUT": _seconds(0, 10 * YEAR),  # or None
    "TIMEOUT_GRACE": _seconds(0, DAY),
    "CANCEL_GRACE": _seconds(0, DAY),
    "HEARTBEAT_INTERVAL": _seconds(0, 3600),
    "POLL_INTERVAL": _seconds(0, 3600),
    "ORPHAN_CHECK_INTERVAL": _seconds(0, DAY),
    "KEYGUARD_INTERVAL": _seconds(0, DAY),
    "PERIODIC_TICK": _seconds(0, 3600),
    "PERIODIC_ACTIVE_TTL": _seconds(0, 30 * DAY),
    # a limiter's fields (LIMITS[name][field])
    "concurrency": _count(0, 1_000_000),
    "rate": _count(0, 1_000_000),
    "per": _seconds(0, YEAR),
    # job options (@job / using) where they are numbers, and limit(name, wait=...)
    "timeout": _seconds(0, 10 * YEAR),
    "expires_in": _seconds(0, 10 * YEAR),
    "unique_for": _seconds(0, 10 * YEAR),
    "wait": _seconds(0, 10 * YEAR, open=False),
}


def _shown(x: float) -> str:
    return f"{x:g}" if x < 1e6 or x != int(x) else f"{int(x):_}"


def allowed(name: str) -> str:
    """What :data:`NUMBERS` allows for ``name``, in words ("an integer >= 1 and <= 10")."""
    b = NUMBERS[name]
    if b.integer:
        low = b.low + 1 if b.open else b.low
        return f"an integer >= {_shown(low)} and <= {_shown(b.high)}"
    return f"a number of seconds {'>' if b.open else '>='} {_shown(b.low)} and <= {_shown(b.high)}"


def number_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not allowed for the number ``name`` of :data:`NUMBERS` (None
    when it is)."""
    b = NUMBERS[name]
    ok_type = isinstance(value, int) if b.integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        return "expected an integer" if b.integer else "expected a number"
    if not math.isfinite(value):
        return "expected a finite number"
    if (b.open and value <= b.low) or (not b.open and value < b.low):
        return f"must be {'>' if b.open else '>='} {_shown(b.low)}"
    if value > b.high:
        return f"must be <= {_shown(b.high)}"
    return None


def check_number(key: str, value: Any) -> Any:
    """``value`` when it suits the setting ``key``; ``ImproperlyConfigured`` naming the
    key and the value otherwise."""
    why = number_problem(key, value)
    if why:
        raise _bad(key, value, why)
    return value


def parse_queue(spec: Any, key: str = "QUEUES") -> QueueSpec:
    """``"name"`` or ``"name:weight"`` (weight a positive integer)."""
    if not isinstance(spec, str) or not spec.strip():
        raise _bad(key, spec, 'expected "name" or "name:weight"')
    name, sep, weight = spec.strip().rpartition(":")
    if not sep:
        name, weight = spec.strip(), "1"
    if not valid_name(name):
        raise _bad(key, spec, "a queue name must be non-empty and contain no whitespace")
    try:
        w = int(weight)
    except ValueError:
        raise _bad(key, spec, "the weight after ':' must be a positive integer") from None
    if w < 1:
        raise _bad(key, spec, "the weight after ':' must be a positive integer")
    return QueueSpec(name, w)


def parse_queues(specs: Any, key: str = "QUEUES") -> tuple[QueueSpec, ...]:
    """Repeated names add up their weights ("a", "a" is "a:2")."""
    if isinstance(specs, str) or not isinstance(specs, (list, tuple)) or not specs:
        raise _bad(key, specs, 'expected a non-empty list of "name[:weight]" strings')
    weights: dict[str, int] = {}
    for spec in specs:
        q = parse_queue(spec, key)
        weights[q.name] = weights.get(q.name, 0) + q.weight
    return tuple(QueueSpec(n, w) for n, w in weights.items())


# Automatic retries and timeouts of the Redis client (rule 11). A command that timed out
# may have run: re-sent by the client, a push queues its job twice, a BRPOP whose reply
# was lost takes a second job, and a periodic claim reads its own first claim as "taken"
# (the slot is never pushed). Callers decide what to retry, so retries stay off; and the
# socket must wait longer than any command that blocks in Redis, or a fetch that found a
# job is cut off before its reply arrives.
_WHY_NO_RETRIES = (
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


def valid_name(value: Any) -> bool:
    """The one check for names that go into Redis keys and log lines (queues, the
    prefix, periodic entries, tags, tokens): a non-empty string with no whitespace."""
    return isinstance(value, str) and bool(value) and not any(c.isspace() for c in value)


def min_socket_timeout() -> float:
    """The shortest ``socket_timeout`` allowed: a blocking fetch's own timeout plus a
    margin for its reply to travel back on a busy machine."""
    return FETCH_BLOCK_SECONDS + SOCKET_TIMEOUT_MARGIN


def _socket_timeout_problem(name: str, value: Any) -> str | None:
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


def _check_redis_options(options: dict) -> None:
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
                f"COGWORKER['REDIS_OPTIONS']['retry'] = {shown} is invalid: {_WHY_NO_RETRIES}; "
                "leave it out (or pass Retry(NoBackoff(), 0))."
            )
    for option in ("retry_on_timeout", "retry_on_error"):
        if options.get(option):
            raise bad(option, options[option], f"{_WHY_NO_RETRIES}; leave it out")
    for option in ("socket_timeout", "socket_connect_timeout"):
        if option in options:
            why = _socket_timeout_problem(option, options[option])
            if why:
                raise bad(option, options[option], why)


def _check_url_query(url: str) -> None:
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
                why = f"{_WHY_NO_RETRIES}; leave it out"
        elif option in ("socket_timeout", "socket_connect_timeout"):
            try:
                number: Any = float(value)
            except ValueError:
                number = value
            why = _socket_timeout_problem(option, number)
        if why:
            raise ImproperlyConfigured(
                f"COGWORKER['REDIS_URL'] sets {option}={value} in its query string, which is "
                f"invalid: {why}."
            )


def retry_backoff() -> Any:
    """The ``RETRY_BACKOFF`` callable, or None when the built-in backoff is used.

    Imported on each call (the hook may live in a module that imports this app); raises
    ``ImproperlyConfigured`` naming the setting when the path can't be imported, does not
    name a callable, or names one that can't take the retry count as its one argument.
    """
    path = get().RETRY_BACKOFF
    if path is None:
        return None
    from django.utils.module_loading import import_string

    def bad(why: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(f"COGWORKER['RETRY_BACKOFF'] = {path!r} {why}.")

    try:
        hook = import_string(path)
    except Exception as exc:  # noqa: BLE001 - any import failure is the message
        from .store.errors import describe

        raise bad(f"can't be imported: {describe(exc)}") from None
    if not callable(hook):
        raise bad(
            f"is not callable (it is {type(hook).__name__}); expected f(retry_count) -> seconds"
        )
    try:
        inspect.signature(hook).bind(1)
    except TypeError:
        raise bad(
            "can't be called with one argument (the retry count); expected f(retry_count) -> seconds"
        ) from None
    except ValueError:
        pass  # no signature to inspect (some builtins): trust it
    return hook


def _with_suggestion(key: Any) -> str:
    """``'QUEUS' (did you mean 'QUEUES'?)`` for a misspelt key."""
    shown = repr(key)
    if isinstance(key, str):
        close = difflib.get_close_matches(key.upper(), DEFAULTS, n=1, cutoff=0.75)
        if close:
            return f"{shown} (did you mean {close[0]!r}?)"
    return shown


# What redis-py's from_url understands.
URL_SCHEMES = ("redis", "rediss", "unix")


def _check_cluster(v: dict) -> None:
    """CLUSTER is a bool, and with it on: no Sentinel or cache alias (each names a client
    of its own kind), a TCP URL on database 0 (a cluster has no other), and a PREFIX whose
    braces, if any, are one well-formed hash tag (keys.root: the tag is the prefix)."""
    if not isinstance(v["CLUSTER"], bool):
        raise _bad("CLUSTER", v["CLUSTER"], "expected True or False")
    if not v["CLUSTER"]:
        return
    if v["SENTINELS"] is not None:
        raise ImproperlyConfigured(
            "COGWORKER['CLUSTER'] = True cannot be combined with COGWORKER['SENTINELS']: a "
            "Redis Cluster fails over by itself (its replicas are promoted without Sentinel). "
            "Remove SENTINELS and SENTINEL_MASTER and point REDIS_URL at any node of the cluster."
        )
    if v["CACHE_ALIAS"] is not None:
        raise ImproperlyConfigured(
            "COGWORKER['CLUSTER'] = True cannot be combined with COGWORKER['CACHE_ALIAS']: the "
            "cache's client is not a cluster client. Remove CACHE_ALIAS and set REDIS_URL to "
            "any node of the cluster."
        )
    url = v["REDIS_URL"]
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("redis", "rediss"):
        raise _bad("REDIS_URL", url, "a Redis Cluster is reached over TCP (redis:// or rediss://)")
    db = parts.path.strip("/") or parse_qs(parts.query).get("db", ["0"])[0]
    if db not in ("", "0"):
        raise _bad("REDIS_URL", url, "a Redis Cluster has database 0 only (end the URL with /0)")
    prefix = v["PREFIX"]
    if isinstance(prefix, str) and ("{" in prefix or "}" in prefix):
        opened, closed = prefix.find("{"), prefix.find("}")
        if not (prefix.count("{") == prefix.count("}") == 1 and opened + 1 < closed):
            raise _bad(
                "PREFIX",
                prefix,
                "with CLUSTER on, a PREFIX may hold one hash tag such as '{cogworker}' (then "
                "used as it is) or no braces at all (then each queue gets its own tag)",
            )
    elif isinstance(prefix, str) and "|" in prefix:
        # keys.home_of: a queue's tag is "{PREFIX|queue}"; a "|" in the prefix could make
        # two prefixes' homes one and the same.
        raise _bad(
            "PREFIX",
            prefix,
            "with CLUSTER on, a PREFIX without braces may not contain '|' (it separates the "
            "prefix from the queue in each queue's hash tag)",
        )


def _validate(user: Any) -> Settings:
    user = _check_keys(user)
    v = {**DEFAULTS, **user}
    # In this order: a message names the first bad key as a reader meets them.
    _check_redis(v)
    sentinels = _check_sentinels(v["SENTINELS"], v["SENTINEL_MASTER"])
    if not valid_name(v["PREFIX"]):
        raise _bad("PREFIX", v["PREFIX"], "expected a non-empty string without whitespace")
    _check_cluster(v)
    queues = parse_queues(v["QUEUES"])
    _check_behaviour(v)
    mw = _check_middleware(v["MIDDLEWARE"])
    if v["TESTING"] not in TESTING_MODES:
        raise _bad("TESTING", v["TESTING"], 'expected None, "fake", "inline" or "redis"')
    if v["RETRY_BACKOFF"] is not None and not isinstance(v["RETRY_BACKOFF"], str):
        raise _bad("RETRY_BACKOFF", v["RETRY_BACKOFF"], "expected a dotted path or None")
    _check_observability(v)
    _check_job_modules(v["JOB_MODULES"])
    from .controls import spec

    limits = spec.parse_limits(v["LIMITS"], valid_name, number_problem, allowed)
    spec.check_default_timeout(v["DEFAULT_TIMEOUT"], number_problem)

    values = {f.name: v[f.name] for f in fields(Settings) if f.name in v}
    values.update(
        QUEUES=queues,
        SENTINELS=sentinels,
        LIMITS=limits,
        JOB_MODULES=tuple(v["JOB_MODULES"]),
        MIDDLEWARE={"client": list(mw.get("client", [])), "server": list(mw.get("server", []))},
        raw=user,
    )
    return Settings(**values)


def _check_keys(user: Any) -> dict[str, Any]:
    """COGWORKER itself: a dict (None: all defaults) of known keys."""
    if user is None:
        return {}
    if not isinstance(user, dict):
        raise ImproperlyConfigured(f"COGWORKER must be a dict, got {type(user).__name__}.")
    unknown = sorted(set(user) - set(DEFAULTS), key=str)
    if unknown:
        raise ImproperlyConfigured(
            f"COGWORKER has unknown key(s) {', '.join(map(_with_suggestion, unknown))}; "
            f"allowed: {', '.join(sorted(DEFAULTS))}."
        )
    return user


def _check_redis(v: dict[str, Any]) -> None:
    """REDIS_URL, the client options and CACHE_ALIAS."""
    if not isinstance(v["REDIS_URL"], str) or "://" not in v["REDIS_URL"]:
        raise _bad("REDIS_URL", v["REDIS_URL"], "expected a URL such as redis://host:6379/0")
    scheme = v["REDIS_URL"].partition("://")[0].lower()
    if scheme not in URL_SCHEMES:
        raise _bad(
            "REDIS_URL",
            v["REDIS_URL"],
            f"the scheme {scheme + '://'!r} is not one Redis clients understand; expected "
            + ", ".join(f"{s}://" for s in URL_SCHEMES),
        )
    for key in ("REDIS_OPTIONS", "SENTINEL_OPTIONS"):
        if not isinstance(v[key], dict):
            raise _bad(key, v[key], "expected a dict of redis client keyword arguments")
    _check_redis_options(v["REDIS_OPTIONS"])
    _check_url_query(v["REDIS_URL"])
    if v["CACHE_ALIAS"] is not None and not isinstance(v["CACHE_ALIAS"], str):
        raise _bad("CACHE_ALIAS", v["CACHE_ALIAS"], "expected the name of a CACHES entry or None")


def _check_sentinels(sentinels: Any, master: Any) -> list[tuple[Any, ...]] | None:
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
        raise _bad("SENTINELS", sentinels, 'expected a list of ("host", port) pairs')
    if not isinstance(master, str) or not master:
        raise _bad("SENTINEL_MASTER", master, "the master's name is required when SENTINELS is set")
    return [tuple(s) for s in sentinels]


def _check_behaviour(v: dict[str, Any]) -> None:
    """FETCH, every number (NUMBERS) and every switch."""
    if v["FETCH"] not in FETCH_MODES:
        raise _bad("FETCH", v["FETCH"], f"expected one of {', '.join(FETCH_MODES)}")
    for key in NUMBERS:
        if key.isupper() and key != "DEFAULT_TIMEOUT":  # (spec.py: it may be None)
            check_number(key, v[key])
    for key in ("PERIODIC_CATCH_UP", "ENQUEUE_ON_COMMIT", "ENQUEUE_DURABLE", "HISTORY"):
        if not isinstance(v[key], bool):
            raise _bad(key, v[key], "expected True or False")


def _check_middleware(mw: Any) -> dict[str, Any]:
    if (
        not isinstance(mw, dict)
        or set(mw) - {"client", "server"}
        or not all(
            isinstance(mw.get(k, []), (list, tuple))
            and all(isinstance(p, str) for p in mw.get(k, []))
            for k in ("client", "server")
        )
    ):
        raise _bad(
            "MIDDLEWARE", mw, 'expected {"client": [dotted paths], "server": [dotted paths]}'
        )
    return mw


def check_metrics_port(value: Any, key: str = "METRICS_PORT") -> int | None:
    """A TCP port (1-65535) or None; ``ImproperlyConfigured`` naming ``key`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise _bad(key, value, "expected a TCP port number from 1 to 65535, or None")
    return value


_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _check_job_modules(value: Any) -> None:
    """A list of dotted module paths (whether they import is the worker's and the
    checks' to say: an import here would run user code at settings time)."""
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(m, str) and _MODULE_PATH.fullmatch(m) for m in value
    ):
        raise _bad(
            "JOB_MODULES", value, 'expected a list of dotted module paths, e.g. ["shop.emails"]'
        )


def _check_observability(v: dict) -> None:
    check_metrics_port(v["METRICS_PORT"])
    token = v["METRICS_TOKEN"]
    if token is not None and (not valid_name(token)):
        raise _bad(
            "METRICS_TOKEN",
            "<hidden>" if isinstance(token, str) else token,
            "expected a non-empty string without whitespace (sent as "
            '"Authorization: Bearer <token>"), or None',
        )
    if not isinstance(v["OTEL"], bool):
        raise _bad("OTEL", v["OTEL"], "expected True or False")
    if v["OTEL"]:
        import importlib.util

        try:
            found = importlib.util.find_spec("opentelemetry.trace") is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise ImproperlyConfigured(
                "COGWORKER['OTEL'] = True needs the opentelemetry-api package: "
                "pip install 'cogworker-django[otel]'."
            )


_lock = threading.Lock()
_cache: Settings | None = None


def get() -> Settings:
    """The validated settings; raises ImproperlyConfigured on a bad value."""
    global _cache
    cached = _cache
    if cached is not None:
        return cached
    from django.conf import settings

    with _lock:
        _cache = _validate(getattr(settings, "COGWORKER", None))
        return _cache


def periodic_raw() -> dict:
    """The raw ``COGWORKER_PERIODIC`` setting (validated by ``periodic.entries``)."""
    from django.conf import settings

    value = getattr(settings, "COGWORKER_PERIODIC", None) or {}
    if not isinstance(value, dict):
        raise ImproperlyConfigured(
            f"COGWORKER_PERIODIC must be a dict of name -> entry, got {type(value).__name__}."
        )
    return value


def reset(**_kwargs: Any) -> None:
    """Forget the cached settings (the next :func:`get` re-reads and re-validates)."""
    global _cache
    with _lock:
        _cache = None


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    # (connection listens for itself: it rebuilds its client from these settings)
    if setting in ("COGWORKER", "COGWORKER_PERIODIC", "CACHES"):
        reset()


setting_changed.connect(_on_setting_changed, dispatch_uid="cogworker_django.conf")


def dead_trim() -> tuple[float, int]:
    """(drop scores below this, keep at most this many) for the dead set, from
    ``DEAD_TIMEOUT`` and ``DEAD_MAX_JOBS``."""
    s = get()
    return time.time() - s.DEAD_TIMEOUT, s.DEAD_MAX_JOBS
