"""The ``COGWORKER`` and ``COGWORKER_PERIODIC`` settings.

Each setting is declared once, as a field of :class:`Settings`: its type once settled,
its default as a user writes it, and its check (or its range in :data:`NUMBERS`).
``DEFAULTS``, the frozen ``Settings`` and the validation are derived from those
declarations; a new setting is one line there.

(Longer than 400 lines on purpose: every setting is validated here, in one place, so each
error names the key, the value and what is allowed the same way.)

Read lazily through :func:`get` on every use (never at import time), so
``override_settings`` works in tests; the validated result is cached until
Django's ``setting_changed`` signal says the settings moved. A bad value raises
``ImproperlyConfigured`` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import math
import re
import threading
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any

from django.core import mail as _django_mail
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from .core import testrun
from .store import redis_checks

# The Redis client's timeouts and the check of its options live with the client
# (store/redis_checks.py); their names here are kept (the settings are checked against
# them, and other code reads them from conf).
from .store.redis_checks import (  # noqa: F401
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_SOCKET_TIMEOUT,
    FETCH_BLOCK_SECONDS,
    SOCKET_TIMEOUT_MARGIN,
    URL_SCHEMES,
    min_socket_timeout,
)

FETCH_MODES = ("reliable", "basic")
# None: "fake" in a test run, else Redis (testrun.py); "redis": Redis even in a test run.
TESTING_MODES = (None, "fake", "inline", "redis")
# The modes in which nothing talks to Redis (the client and Redis checks skip them).
LOCAL_MODES = ("fake", "inline")


@dataclass(frozen=True)
class QueueSpec:
    name: str
    weight: int


def _bad(key: str, value: Any, allowed: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"COGWORKER[{key!r}] = {value!r} is invalid: {allowed}.")


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


def valid_name(value: Any) -> bool:
    """The one check for names that go into Redis keys and log lines (queues, the
    prefix, periodic entries, tags, tokens): a non-empty string with no whitespace."""
    return isinstance(value, str) and bool(value) and not any(c.isspace() for c in value)


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


def _check_cluster(key: str, value: Any, v: dict) -> bool:
    """CLUSTER is a bool, and with it on: no Sentinel or cache alias (each names a client
    of its own kind), a TCP URL on database 0 (a cluster has no other), and a PREFIX whose
    braces, if any, are one well-formed hash tag (keys.root: the tag is the prefix)."""
    if not _bool(key, value, v):
        return False
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
    redis_checks.check_cluster_url("REDIS_URL", v["REDIS_URL"])
    redis_checks.check_cluster_prefix("PREFIX", v["PREFIX"])
    if isinstance(v["TEST_PREFIX"], str):
        redis_checks.check_cluster_prefix("TEST_PREFIX", v["TEST_PREFIX"])
    return True


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


def _check_middleware(key: str, mw: Any, _v: dict) -> dict[str, Any]:
    if (
        not isinstance(mw, dict)
        or set(mw) - {"client", "server"}
        or not all(
            isinstance(mw.get(k, []), (list, tuple))
            and all(isinstance(p, str) for p in mw.get(k, []))
            for k in ("client", "server")
        )
    ):
        raise _bad(key, mw, 'expected {"client": [dotted paths], "server": [dotted paths]}')
    return {"client": list(mw.get("client", [])), "server": list(mw.get("server", []))}


def check_metrics_port(value: Any, key: str = "METRICS_PORT") -> int | None:
    """A TCP port (1-65535) or None; ``ImproperlyConfigured`` naming ``key`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise _bad(key, value, "expected a TCP port number from 1 to 65535, or None")
    return value


_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _check_job_modules(key: str, value: Any, _v: dict) -> tuple[str, ...]:
    """A list of dotted module paths (whether they import is the worker's and the
    checks' to say: an import here would run user code at settings time)."""
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(m, str) and _MODULE_PATH.fullmatch(m) for m in value
    ):
        raise _bad(key, value, 'expected a list of dotted module paths, e.g. ["shop.emails"]')
    return tuple(value)


def _redis_url(key: str, url: Any, _v: dict) -> str:
    return redis_checks.check_redis_url(key, url)


def _metrics_token(key: str, token: Any, _v: dict) -> Any:
    if token is not None and (not valid_name(token)):
        raise _bad(
            key,
            "<hidden>" if isinstance(token, str) else token,
            "expected a non-empty string without whitespace (sent as "
            '"Authorization: Bearer <token>"), or None',
        )
    return token


def _otel(key: str, value: Any, v: dict) -> bool:
    if not _bool(key, value, v):
        return False
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
    return True


# Each setting is declared once, below: its name, its type once settled, its default (as
# a user would write it, API.md and docs/configuration.md) and its check. DEFAULTS, the
# frozen Settings and the validation are all read from these declarations. Checks run in
# the order the settings are declared, so an error names the first bad key a reader of
# this list would meet.


def setting(default: Any, check: Any = None, *, number: Bound | None = None) -> Any:
    """One declared setting: ``check(key, value, values) -> settled value`` (raises
    ``ImproperlyConfigured``; ``values`` is every setting, for the checks that look at
    two), or ``number``: a range of :data:`NUMBERS`. A dict or list default is copied for
    each use."""
    meta = {"check": check, "number": number, "default": default}
    if isinstance(default, dict | list):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def _bool(key: str, value: Any, _v: dict) -> bool:
    if not isinstance(value, bool):
        raise _bad(key, value, "expected True or False")
    return value


def _one_of(modes: tuple, allowed_text: str) -> Any:
    def check(key: str, value: Any, _v: dict) -> Any:
        if value not in modes:
            raise _bad(key, value, allowed_text)
        return value

    return check


def _client_options(key: str, value: Any, _v: dict) -> dict:
    if not isinstance(value, dict):
        raise _bad(key, value, "expected a dict of redis client keyword arguments")
    if key == "REDIS_OPTIONS":
        redis_checks.check_redis_options(value)
    return value


def _optional_str(what: str) -> Any:
    def check(key: str, value: Any, _v: dict) -> Any:
        if value is not None and not isinstance(value, str):
            raise _bad(key, value, f"expected {what} or None")
        return value

    return check


def _prefix(key: str, value: Any, _v: dict) -> str:
    if not valid_name(value):
        raise _bad(key, value, "expected a non-empty string without whitespace")
    return str(value)


def _test_prefix(key: str, value: Any, _v: dict) -> str | bool | None:
    if value is None or value is False:
        return value
    if not valid_name(value):
        raise _bad(
            key,
            value,
            "expected None (the default: 'test_' + PREFIX in a test run), a prefix (a "
            "non-empty string without whitespace), or False (PREFIX itself in tests too)",
        )
    return str(value)


def _limits(key: str, value: Any, _v: dict) -> dict:
    from .controls import spec

    return spec.parse_limits(value, valid_name, number_problem, allowed)


def _default_timeout(key: str, value: Any, _v: dict) -> Any:
    from .controls import spec

    spec.check_default_timeout(value, number_problem)
    return value


@dataclass(frozen=True)
class Settings:
    """The validated ``COGWORKER`` setting. Attribute names are the setting keys; each
    declaration gives the raw default and the check that settles a value."""

    REDIS_URL: str = setting("redis://127.0.0.1:6379/0", _redis_url)
    REDIS_OPTIONS: dict = setting({}, _client_options)
    CACHE_ALIAS: str | None = setting(None, _optional_str("the name of a CACHES entry"))
    SENTINELS: list | None = setting(
        None, lambda k, s, v: redis_checks.check_sentinels(s, v["SENTINEL_MASTER"])
    )
    SENTINEL_MASTER: str | None = setting(None)  # checked with SENTINELS
    SENTINEL_OPTIONS: dict = setting({}, _client_options)
    PREFIX: str = setting("cogworker", _prefix)
    # The prefix of a test run's keys (testing.md): None, "test_" + PREFIX (and the
    # pytest-xdist or Django runner's worker number); False: PREFIX itself.
    TEST_PREFIX: str | bool | None = setting(None, _test_prefix)
    # Redis Cluster (docs/cluster.md): REDIS_URL names any node; keys carry a hash tag.
    CLUSTER: bool = setting(False, _check_cluster)
    CONCURRENCY: int = setting(10, number=_count(0, 10_000))
    # async def jobs at once per process, on its event loop (besides the CONCURRENCY threads).
    ASYNC_CONCURRENCY: int = setting(100, number=_count(0, 100_000))
    QUEUES: tuple[QueueSpec, ...] = setting(["default"], lambda k, s, v: parse_queues(s, k))
    FETCH: str = setting("reliable", _one_of(FETCH_MODES, "expected one of reliable, basic"))
    SHUTDOWN_TIMEOUT: float = setting(25, number=_seconds(0, DAY, open=False))
    ORPHAN_THRESHOLD: float = setting(300, number=_seconds(0, 7 * DAY))
    # A worker's connections carry its identity (CLIENT SETNAME): a killed worker's jobs
    # are recovered within seconds (docs/reliability.md). False behind a proxy that
    # accepts the command without passing it on (Envoy): ORPHAN_THRESHOLD alone then.
    CLIENT_NAMES: bool = setting(True, _bool)
    MAX_ORPHANINGS: int = setting(3, number=_count(0, 1_000))
    FETCH_IDLE_MAX_INTERVAL: float = setting(1.0, number=_seconds(0, 60))
    UNIQUE_LOCK_TTL: int = setting(86400, number=_count(0, 10 * YEAR))
    # Seconds a while_executing job waits before trying again when another run holds its lock.
    UNIQUE_RESCHEDULE_DELAY: float = setting(5.0, number=_seconds(0, DAY))
    PERIODIC_CATCH_UP: bool = setting(False, _bool)
    # Catch-up off: the last slot missed while no worker ran still fires at a worker's
    # start when it passed less than this many seconds before it (a restart's gap).
    PERIODIC_GRACE: float = setting(300, number=_seconds(0, 30 * DAY, open=False))
    DEAD_MAX_JOBS: int = setting(10000, number=_count(0, 10**9, open=False))
    DEAD_TIMEOUT: float = setting(180 * DAY, number=_seconds(0, 10 * YEAR))
    HISTORY_MAX_RUNS: int = setting(100000, number=_count(0, 10**9, open=False))
    RESULT_TTL: int = setting(DAY, number=_count(0, 10 * YEAR))
    # How long a @job's outcome and return value are kept (JobRef.result, status): ten
    # minutes, long enough for a caller waiting on it, short enough that a busy fleet's
    # results weigh little (docs/jobs.md gives the bytes per result). 0 keeps none.
    JOB_RESULT_TTL: int = setting(600, number=_count(0, 10 * YEAR, open=False))
    # Workflows: how long a batch stays in Redis once on_success has fired, and how long
    # an unfinished one stays after its last activity.
    BATCH_TTL: int = setting(7 * DAY, number=_count(0, 10 * YEAR))
    BATCH_UNFINISHED_TTL: int = setting(30 * DAY, number=_count(0, 10 * YEAR))
    # The largest job payload (JSON, in bytes) an enqueue accepts (Redis's largest string).
    MAX_PAYLOAD_BYTES: int = setting(1024 * 1024, number=_count(0, 512 * 1024 * 1024))
    ENQUEUE_ON_COMMIT: bool = setting(False, _bool)
    # Every enqueue writes an outbox row in the caller's transaction (docs/jobs.md).
    ENQUEUE_DURABLE: bool = setting(False, _bool)
    MIDDLEWARE: dict = setting({"client": [], "server": []}, _check_middleware)
    TESTING: str | None = setting(
        None, _one_of(TESTING_MODES, 'expected None, "fake", "inline" or "redis"')
    )
    # Job controls (docs/controls.md): fleet-wide limiters by name, and the time limit of
    # jobs that set none (None: no limit).
    LIMITS: dict = setting({}, _limits)
    DEFAULT_TIMEOUT: float | None = setting(None, _default_timeout, number=_seconds(0, 10 * YEAR))
    # After a timeout (or a cancel's interruption) is raised, how long a job stuck in a C
    # call gets before its thread is abandoned and the job filed; and how long a
    # cancelled job gets to notice cancelled() before the worker interrupts it.
    TIMEOUT_GRACE: float = setting(10.0, number=_seconds(0, DAY))
    CANCEL_GRACE: float = setting(5.0, number=_seconds(0, DAY))
    # Internal timings (seconds). Documented; tests shorten them.
    HEARTBEAT_INTERVAL: float = setting(5.0, number=_seconds(0, 3600))
    POLL_INTERVAL: float = setting(5.0, number=_seconds(0, 3600))
    ORPHAN_CHECK_INTERVAL: float = setting(60.0, number=_seconds(0, DAY))
    KEYGUARD_INTERVAL: float = setting(60.0, number=_seconds(0, DAY))
    PERIODIC_TICK: float = setting(5.0, number=_seconds(0, 3600))
    # How long an until_executed periodic run's lock outlives its last heartbeat refresh.
    PERIODIC_ACTIVE_TTL: float = setting(60.0, number=_seconds(0, 30 * DAY))
    # A dotted path to f(retry_count) -> seconds; None: the built-in formula.
    RETRY_BACKOFF: str | None = setting(None, _optional_str("a dotted path"))
    HISTORY: bool = setting(True, _bool)
    # Observability (docs/observability.md): the worker's /metrics port, the bearer token
    # both metrics endpoints want, OpenTelemetry traces across enqueue and run.
    METRICS_PORT: int | None = setting(None, lambda k, p, v: check_metrics_port(p, k))
    METRICS_TOKEN: str | None = setting(None, _metrics_token)
    OTEL: bool = setting(False, _otel)
    # More modules a worker imports at start for their @job functions, besides the jobs
    # and tasks modules of installed apps (jobs.import_job_modules).
    JOB_MODULES: tuple[str, ...] = setting([], _check_job_modules)
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def queue_names(self) -> list[str]:
        """Distinct queue names in configured order."""
        return list(dict.fromkeys(q.name for q in self.QUEUES))


DECLARED = tuple(f for f in fields(Settings) if f.name != "raw")
DEFAULTS: dict[str, Any] = {f.name: f.metadata["default"] for f in DECLARED}

# Every number the package takes from its user, with its allowed range, in one table:
# the settings' (declared above), a limiter's fields, the job options and limit()'s wait.
# A number is finite and in range; NaN (which every comparison lets through) and inf
# never are. docs/configuration.md lists the same ranges.
NUMBERS: dict[str, Bound] = {
    **{f.name: f.metadata["number"] for f in DECLARED if f.metadata["number"]},
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


def _validate(user: Any) -> Settings:
    user = _check_keys(user)
    v = {**DEFAULTS, **user}
    values = {}
    for f in DECLARED:
        check, number = f.metadata["check"], f.metadata["number"]
        if check is not None:
            values[f.name] = check(f.name, v[f.name], v)
        elif number is not None:
            values[f.name] = check_number(f.name, v[f.name])
        else:
            values[f.name] = v[f.name]
    return Settings(**values, raw=user)


_lock = threading.Lock()
# Django's test environment is told by django.core.mail.outbox (testrun.py); read here
# from the module's dict, the cheapest look (conf.get() is on every key's path).
_MAIL = _django_mail.__dict__
# (whether Django's test environment was set up, the settings): Django's test runner
# sets it up after the app is ready, so a read before it must not stay. (The pytest
# plugin's session default clears the cache itself: testrun.on_session_change.)
_cache: tuple[bool, Settings] | None = None


def get() -> Settings:
    """The validated settings; raises ImproperlyConfigured on a bad value. In a test
    run, ``PREFIX`` is the test prefix (:func:`for_tests`)."""
    global _cache
    cached = _cache
    if cached is not None and cached[0] is ("outbox" in _MAIL):
        return cached[1]
    from django.conf import settings

    with _lock:
        django_tests = "outbox" in _MAIL
        value = _validate(getattr(settings, "COGWORKER", None))
        if testrun.in_test_run():
            value = for_tests(value)
        _cache = (django_tests, value)
        return value


def for_tests(s: Settings) -> Settings:
    """``s`` as a test run sees it: its keys under ``TEST_PREFIX`` (default ``"test_"`` +
    PREFIX, with the worker number of pytest-xdist or Django's parallel runner), so that
    no job of a test ever reaches a development worker reading PREFIX on the same Redis."""
    if s.TEST_PREFIX is False:
        return s
    chosen = s.TEST_PREFIX
    prefix = chosen if isinstance(chosen, str) else f"test_{s.PREFIX}{testrun.worker_suffix()}"
    return replace(s, PREFIX=prefix)


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
testrun.on_session_change(reset)


def dead_trim() -> tuple[float, int]:
    """(drop scores below this, keep at most this many) for the dead set, from
    ``DEAD_TIMEOUT`` and ``DEAD_MAX_JOBS``."""
    s = get()
    return time.time() - s.DEAD_TIMEOUT, s.DEAD_MAX_JOBS
