"""The ``COGWORKER`` and ``COGWORKER_PERIODIC`` settings.

Read lazily through :func:`get` on every use (never at import time), so
``override_settings`` works in tests; the validated result is cached until
Django's ``setting_changed`` signal says the settings moved. A bad value raises
``ImproperlyConfigured`` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields
from typing import Any

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
    "CONCURRENCY": 10,
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
    "ENQUEUE_ON_COMMIT": False,
    "MIDDLEWARE": {"client": [], "server": []},
    "TESTING": None,
    # Internal timings (seconds). Documented; tests shorten them.
    "HEARTBEAT_INTERVAL": 5.0,
    "POLL_INTERVAL": 5.0,
    "ORPHAN_CHECK_INTERVAL": 60.0,
    "KEYGUARD_INTERVAL": 60.0,
    "PERIODIC_TICK": 5.0,
    # How long an until_executed periodic run's lock outlives its last heartbeat refresh.
    "PERIODIC_ACTIVE_TTL": 60.0,
    "RETRY_BACKOFF": None,  # dotted path to f(retry_count) -> seconds; None = built-in formula
    "HISTORY": True,
}

FETCH_MODES = ("reliable", "basic")
TESTING_MODES = (None, "fake", "inline")


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
    CONCURRENCY: int
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
    ENQUEUE_ON_COMMIT: bool
    MIDDLEWARE: dict
    TESTING: str | None
    HEARTBEAT_INTERVAL: float
    POLL_INTERVAL: float
    ORPHAN_CHECK_INTERVAL: float
    KEYGUARD_INTERVAL: float
    PERIODIC_TICK: float
    PERIODIC_ACTIVE_TTL: float
    RETRY_BACKOFF: str | None
    HISTORY: bool
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def queue_names(self) -> list[str]:
        """Distinct queue names in configured order."""
        return list(dict.fromkeys(q.name for q in self.QUEUES))


def _bad(key: str, value: Any, allowed: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"COGWORKER[{key!r}] = {value!r} is invalid: {allowed}.")


def _number(key, value, *, minimum=0.0, strict=True, integer=False):
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        kind = "an integer" if integer else "a number"
        raise _bad(key, value, f"expected {kind}")
    if (strict and value <= minimum) or (not strict and value < minimum):
        shown = int(minimum) if integer or minimum == int(minimum) else minimum
        raise _bad(key, value, f"must be {'>' if strict else '>='} {shown}")
    return value


def parse_queue(spec: Any, key: str = "QUEUES") -> QueueSpec:
    """``"name"`` or ``"name:weight"`` (weight a positive integer)."""
    if not isinstance(spec, str) or not spec.strip():
        raise _bad(key, spec, 'expected "name" or "name:weight"')
    name, sep, weight = spec.strip().rpartition(":")
    if not sep:
        name, weight = spec.strip(), "1"
    if not name or any(c.isspace() for c in name):
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


def _validate(user: Any) -> Settings:
    if user is None:
        user = {}
    if not isinstance(user, dict):
        raise ImproperlyConfigured(f"COGWORKER must be a dict, got {type(user).__name__}.")
    unknown = sorted(set(user) - set(DEFAULTS))
    if unknown:
        raise ImproperlyConfigured(
            f"COGWORKER has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(sorted(DEFAULTS))}."
        )
    v = {**DEFAULTS, **user}

    if not isinstance(v["REDIS_URL"], str) or "://" not in v["REDIS_URL"]:
        raise _bad("REDIS_URL", v["REDIS_URL"], "expected a URL such as redis://host:6379/0")
    for key in ("REDIS_OPTIONS", "SENTINEL_OPTIONS"):
        if not isinstance(v[key], dict):
            raise _bad(key, v[key], "expected a dict of redis client keyword arguments")
    if v["CACHE_ALIAS"] is not None and not isinstance(v["CACHE_ALIAS"], str):
        raise _bad("CACHE_ALIAS", v["CACHE_ALIAS"], "expected the name of a CACHES entry or None")
    sentinels = v["SENTINELS"]
    if sentinels is not None:
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
        if not isinstance(v["SENTINEL_MASTER"], str) or not v["SENTINEL_MASTER"]:
            raise _bad(
                "SENTINEL_MASTER",
                v["SENTINEL_MASTER"],
                "the master's name is required when SENTINELS is set",
            )
        sentinels = [tuple(s) for s in sentinels]
    prefix = v["PREFIX"]
    if not isinstance(prefix, str) or not prefix or any(c.isspace() for c in prefix):
        raise _bad("PREFIX", prefix, "expected a non-empty string without whitespace")
    _number("CONCURRENCY", v["CONCURRENCY"], integer=True)
    queues = parse_queues(v["QUEUES"])
    if v["FETCH"] not in FETCH_MODES:
        raise _bad("FETCH", v["FETCH"], f"expected one of {', '.join(FETCH_MODES)}")
    for key in ("SHUTDOWN_TIMEOUT",):
        _number(key, v[key], strict=False)
    for key in (
        "ORPHAN_THRESHOLD",
        "FETCH_IDLE_MAX_INTERVAL",
        "DEAD_TIMEOUT",
        "HEARTBEAT_INTERVAL",
        "POLL_INTERVAL",
        "ORPHAN_CHECK_INTERVAL",
        "KEYGUARD_INTERVAL",
        "PERIODIC_TICK",
        "PERIODIC_ACTIVE_TTL",
        "UNIQUE_RESCHEDULE_DELAY",
    ):
        _number(key, v[key])
    for key in ("MAX_ORPHANINGS", "UNIQUE_LOCK_TTL", "RESULT_TTL"):
        _number(key, v[key], integer=True)
    for key in ("DEAD_MAX_JOBS", "HISTORY_MAX_RUNS"):
        _number(key, v[key], integer=True, strict=False)
    for key in ("PERIODIC_CATCH_UP", "ENQUEUE_ON_COMMIT", "HISTORY"):
        if not isinstance(v[key], bool):
            raise _bad(key, v[key], "expected True or False")
    mw = v["MIDDLEWARE"]
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
    if v["TESTING"] not in TESTING_MODES:
        raise _bad("TESTING", v["TESTING"], 'expected None, "fake" or "inline"')
    if v["RETRY_BACKOFF"] is not None and not isinstance(v["RETRY_BACKOFF"], str):
        raise _bad("RETRY_BACKOFF", v["RETRY_BACKOFF"], "expected a dotted path or None")

    values = {f.name: v[f.name] for f in fields(Settings) if f.name in v}
    values.update(
        QUEUES=queues,
        SENTINELS=sentinels,
        MIDDLEWARE={"client": list(mw.get("client", [])), "server": list(mw.get("server", []))},
        raw=user,
    )
    return Settings(**values)


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
    if setting in ("COGWORKER", "COGWORKER_PERIODIC", "CACHES"):
        reset()
        from . import connection

        connection.reset()


setting_changed.connect(_on_setting_changed, dispatch_uid="cogworker_django.conf")
