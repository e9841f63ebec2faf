"""Classifying Redis errors, best-effort writes, and log-once outage reporting.

Rules 5 and 12: an outage (refused, reset, timeout, READONLY, LOADING,
MASTERDOWN, UNBLOCKED, BUSY, OOM...) is *unavailable*: retry soon, log once per
component until it recovers, then log "recovered". Anything else (WRONGTYPE, bad data)
is *deterministic*: logged every time and backed off by the caller.

The numbered rules that comments across the package cite ("rule 4") are explained, with
why each exists and which code and tests keep it, in docs/internals.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from math import inf
from typing import Any

import redis.exceptions as rx

from . import runtime

log = logging.getLogger("cogworker_django")


class CogworkerError(Exception):
    """Base class of every exception this package raises of its own (a bad setting is
    Django's ``ImproperlyConfigured``, a bad argument ``TypeError``/``ValueError``, as
    Django and Python do), so ``except CogworkerError`` catches them all."""


# Error replies that mean "Redis can't serve this right now", not "this command is wrong".
_UNAVAILABLE_PREFIXES = (
    "LOADING",
    "READONLY",
    "MASTERDOWN",
    "UNBLOCKED",  # a blocked command cut off by a failover (a plain ResponseError)
    "BUSY",  # a long-running script
    "OOM",  # maxmemory under noeviction
    "TRYAGAIN",
    "CLUSTERDOWN",
    "NOREPLICAS",
    "NOMASTERLINK",
    "NOT_CONNECTED",
)


# redis-py turns some of those replies into their own classes and strips the code from the
# message ("READONLY You can't write..." arrives as ReadOnlyError("You can't write...")).
_UNAVAILABLE_CLASSES = tuple(
    getattr(rx, name)
    for name in (
        "ConnectionError",
        "TimeoutError",
        "BusyLoadingError",
        "ReadOnlyError",
        "OutOfMemoryError",
        "MasterDownError",
        "TryAgainError",
        "ClusterDownError",
    )
    if hasattr(rx, name)
)


def is_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` means Redis is away (retry later), False when it is deterministic."""
    if isinstance(exc, _UNAVAILABLE_CLASSES):
        return True
    if isinstance(exc, (OSError, ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, rx.ResponseError):
        code = safe_str(getattr(exc, "status_code", None) or "").upper()
        text = safe_str(exc).lstrip().upper()
        return code.startswith(_UNAVAILABLE_PREFIXES) or text.startswith(_UNAVAILABLE_PREFIXES)
    return False


def safe_str(value: Any, limit: int | None = None) -> str:
    """``str(value)`` that never raises (rule 7)."""
    try:
        text = str(value)
    except BaseException:  # noqa: BLE001 - a broken __str__ must not escape
        try:
            text = f"<{type(value).__name__} (str() raised)>"
        except BaseException:  # noqa: BLE001
            text = "<unprintable>"
    return text[:limit] if limit else text


def describe(exc: BaseException) -> str:
    """``Class: message`` for log lines, never raising."""
    return f"{type(exc).__name__}: {safe_str(exc, 500)}"


class Reporter:
    """Logs an outage once per component, and "recovered" once when it ends.

    A component that several threads run (the processors' fetches) can hear of an
    attempt that failed after another thread's later attempt succeeded: a thread that
    lost the CPU between its error and its report, around Redis's return. ``began``
    (``time.monotonic()`` when the failed attempt started) lets such a stale failure be
    dropped instead of logging a second outage that never happened."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down: set[str] = set()
        self._recovered_at: dict[str, float] = {}
        self._once: set[tuple[str, ...]] = set()

    def report(
        self,
        component: str,
        exc: BaseException,
        detail: str | None = None,
        *,
        began: float | None = None,
        then: str = "retrying until it is back",
    ) -> None:
        """``then``: what happens next, for the outage's line (a process that does not
        retry itself says who does)."""
        where = f"{component}: {detail}" if detail else component
        if is_unavailable(exc):
            with self._lock:
                if began is not None and began < self._recovered_at.get(component, -inf):
                    return  # an attempt older than the last success: not news
                first = component not in self._down
                self._down.add(component)
            if first:
                log.warning("%s: Redis unavailable (%s); %s", where, describe(exc), then)
            return
        log.error("%s failed: %s", where, describe(exc))

    def recovered(self, component: str) -> None:
        with self._lock:
            was_down = component in self._down
            self._down.discard(component)
            if was_down:
                self._recovered_at[component] = time.monotonic()
        if was_down:
            # INFO: good news; the outage's own line was the warning.
            log.info("%s: Redis recovered", component)

    def is_down(self, component: str) -> bool:
        with self._lock:
            return component in self._down

    def first_time(self, *what: str) -> bool:
        """True the first time ``what`` (a hook and its kind of problem, say) is asked
        about in this process: what a "logged once" message logs on."""
        with self._lock:
            if what in self._once:
                return False
            self._once.add(what)
            return True

    def reset(self) -> None:
        with self._lock:
            self._down.clear()
            self._recovered_at.clear()
            self._once.clear()


# The process's reporter is its runtime's (runtime.py): a test's fresh runtime starts with
# nothing down and nothing logged yet.
def report(
    component: str,
    exc: BaseException,
    detail: str | None = None,
    *,
    began: float | None = None,
    then: str = "retrying until it is back",
) -> None:
    runtime.current().of(Reporter).report(component, exc, detail, began=began, then=then)


def recovered(component: str) -> None:
    runtime.current().of(Reporter).recovered(component)


def first_time(*what: str) -> bool:
    return runtime.current().of(Reporter).first_time(*what)


def __getattr__(name: str) -> Any:
    if name == "reporter":  # errors.reporter: the process's, as before the runtime
        return runtime.current().of(Reporter)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def best_effort(component: str, fn: Callable[[], Any], detail: str | None = None) -> bool:
    """Run ``fn``; on any error report it and return False (rule 4). True on success."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - secondary writes never fail the caller
        report(component, exc, detail)
        return False
    recovered(component)
    return True


class Backoff:
    """:func:`best_effort` for chores that repeat (rule 5): after a deterministic failure
    a chore is skipped for 5 s, then 10 s, 20 s ... up to 5 min while it keeps failing,
    so a broken key costs a few log lines, not one per poll; an outage is retried at the
    caller's own pace (and logged once); a success resets the backoff."""

    FIRST = 5.0
    MAX = 300.0

    def __init__(
        self,
        first: float = FIRST,
        maximum: float = MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first = first
        self.maximum = maximum
        self.clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, tuple[float, float]] = {}  # component -> (next try, delay)

    def ready(self, component: str) -> bool:
        return self.remaining(component) == 0.0

    def remaining(self, component: str) -> float:
        """Seconds before ``component`` is tried again (0 when it is not backing off)."""
        with self._lock:
            state = self._state.get(component)
        return max(0.0, state[0] - self.clock()) if state is not None else 0.0

    def failed(self, component: str) -> float:
        """Note a deterministic failure of ``component``; returns the delay before it is
        tried again (the first delay, then doubling up to the maximum)."""
        with self._lock:
            state = self._state.get(component)
            delay = min(state[1] * 2, self.maximum) if state else self.first
            self._state[component] = (self.clock() + delay, delay)
        return delay

    def succeeded(self, component: str) -> None:
        """``component`` worked: no backoff from now on."""
        with self._lock:
            self._state.pop(component, None)

    def run(self, component: str, fn: Callable[[], Any], detail: str | None = None) -> bool:
        """Run ``fn`` unless backing off; True on success, False if failed or skipped."""
        if not self.ready(component):
            return False
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - reported, never raised (rule 4)
            if is_unavailable(exc):
                report(component, exc, detail)
                return False
            delay = self.failed(component)
            where = f"{component}: {detail}" if detail else component
            log.error("%s failed (next try in %.0fs): %s", where, delay, describe(exc))
            return False
        self.succeeded(component)
        recovered(component)
        return True
