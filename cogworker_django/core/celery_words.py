"""Celery's names for an enqueue, on every job function and ``using()`` variant:
``delay(*args, **kwargs)`` is ``enqueue``; ``apply_async(args, kwargs, countdown=,
eta=, queue=, expires=)`` is ``enqueue_in`` / ``enqueue_at`` / ``using(queue=,
expires_in=)``. A Celery option with no counterpart is refused, saying what to use
instead (docs/celery.md), rather than silently dropped.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Mapping
from typing import Any

# Celery's apply_async options that are not taken here, and what to use instead.
_INSTEAD = {
    "priority": "a queue per priority, weighted in COGWORKER['QUEUES'] "
    '(["critical:3", "default:2", "low"]), and queue=',
    "routing_key": "queue=",
    "exchange": "queue=",
    "exchange_type": "queue=",
    "retry": "nothing: an enqueue is one Redis command; a job's own retries are "
    "@job(retry=) or using(retry=)",
    "retry_policy": "nothing: an enqueue is one Redis command",
    "serializer": "nothing: payloads are always JSON (docs/jobs.md, 'What an argument may be')",
    "compression": "nothing: payloads are always JSON; pass an id, not the data",
    "link": "chain(first.s(...), then.s()).enqueue()",
    "link_error": "@job(on_dead=handler.s())",
    "task_id": "nothing: the jid is made at enqueue and returned",
    "headers": "a client middleware (COGWORKER['MIDDLEWARE']['client'])",
    "time_limit": "using(timeout=seconds)",
    "soft_time_limit": "using(timeout=seconds)",
    "ignore_result": "using(result_ttl=0)",
    "shadow": "nothing: a job is shown under its function's dotted path",
    "add_to_parent": "nothing",
    "chord": "group(...).enqueue(then=callback.s())",
    "group_id": "Batch or group(...)",
    "reply_to": "nothing",
    "mandatory": "nothing",
    "immediate": "nothing",
    "producer": "nothing",
    "connection": "nothing: the connection is COGWORKER's",
    "router": "queue=, or using(queue=)",
    "publisher": "nothing",
}


def _seconds(where: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{where}: {name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: {name} = {value!r} is not a finite number of seconds")
    return float(value)


def _epoch(where: str, name: str, value: Any) -> float:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"{where}: {name} must be timezone-aware, got {value!r} (e.g. "
                "django.utils.timezone.now() + timedelta(minutes=5))"
            )
        return value.timestamp()
    raise TypeError(f"{where}: {name} must be an aware datetime, got {value!r}")


class CeleryWords:
    """``delay`` and ``apply_async``, mixed into jobs._Enqueuer (which provides
    ``enqueue``, ``enqueue_in``, ``enqueue_at``, ``using`` and ``_fn``)."""

    def delay(self, *args: Any, **kwargs: Any) -> Any:
        """Celery's name for :meth:`enqueue`: push the job; returns what it returns."""
        return self.enqueue(*args, **kwargs)  # type: ignore[attr-defined]

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        *,
        countdown: Any = None,
        eta: Any = None,
        queue: str | None = None,
        expires: Any = None,
        **celery_options: Any,
    ) -> Any:
        """Celery's ``apply_async``: ``countdown`` (seconds) is :meth:`enqueue_in`,
        ``eta`` (an aware datetime) :meth:`enqueue_at`, ``queue`` and ``expires``
        (seconds from now, or an aware datetime, as Celery counts it) a ``using()``
        variant. Returns what the enqueue returns."""
        where = f"{self._fn.path}.apply_async()"  # type: ignore[attr-defined]
        if celery_options:
            raise TypeError(_refusal(where, celery_options))
        if args is None:
            args = ()
        elif not isinstance(args, (list, tuple)):
            raise TypeError(f"{where}: args must be a list or tuple, got {args!r}")
        if kwargs is None:
            kwargs = {}
        elif not isinstance(kwargs, Mapping):
            raise TypeError(f"{where}: kwargs must be a dict, got {kwargs!r}")
        if countdown is not None and eta is not None:
            raise ValueError(
                f"{where}: countdown and eta both say when to run: give one (countdown "
                "seconds from now, or eta an aware datetime)"
            )
        now = time.time()
        start = now
        if countdown is not None:
            start = now + _seconds(where, "countdown", countdown)
        elif eta is not None:
            start = _epoch(where, "eta", eta)
        options: dict[str, Any] = {}
        if queue is not None:
            options["queue"] = queue
        if expires is not None:
            until = (
                _epoch(where, "expires", expires)
                if isinstance(expires, dt.datetime)
                else now + _seconds(where, "expires", expires)
            )
            # Celery counts expires from now; expires_in counts from when the job may
            # first run (its countdown or eta).
            options["expires_in"] = until - max(now, start)
            if options["expires_in"] <= 0:
                raise ValueError(
                    f"{where}: expires = {expires!r} comes before the job may run "
                    f"(countdown = {countdown!r}, eta = {eta!r}): it would never run"
                )
        target: Any = self.using(**options) if options else self  # type: ignore[attr-defined]
        args, kwargs = tuple(args), dict(kwargs)
        if countdown is not None:
            return target.enqueue_in(start - now, *args, **kwargs)
        if eta is not None:
            return target.enqueue_at(eta, *args, **kwargs)
        return target.enqueue(*args, **kwargs)


def _refusal(where: str, options: dict[str, Any]) -> str:
    parts = []
    for name in sorted(options):
        instead = _INSTEAD.get(name)
        if instead is None:
            parts.append(f"{name!r} is not an option of apply_async")
        else:
            parts.append(f"Celery's {name!r} is not taken here; use {instead}")
    return (
        f"{where}: "
        + "; ".join(parts)
        + " (it takes args, kwargs, countdown, eta, queue and expires; docs/celery.md)"
    )
