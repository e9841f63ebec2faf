"""Checking the job controls' options and settings, and writing them into payloads.

Job options (``@job(...)`` and ``using(...)``): ``timeout`` (seconds > 0, or ``False``
for none whatever ``DEFAULT_TIMEOUT`` says), ``expires_in`` (seconds > 0) and
``limits`` (a list of names from ``COGWORKER["LIMITS"]``). The setting: ``LIMITS``
maps a name to ``{"concurrency": N}``, ``{"rate": N, "per": S}`` or both.

(``LIMITS`` and ``DEFAULT_TIMEOUT`` themselves are checked by conf, through spec.py.)

Payload fields: ``timeout`` (seconds, 0 for none), ``expires_at`` (epoch seconds:
the enqueue, or the scheduled time, plus ``expires_in``) and ``limits``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..conf import number_problem
from .spec import LimitSpec

OPTION_NAMES = ("timeout", "expires_in", "limits")
__all__ = [
    "OPTION_NAMES",
    "LimitSpec",
    "check_names",
    "check_options",
    "check_registered_jobs",
    "payload_fields",
]


def check_options(where: str, opts: dict[str, Any]) -> None:
    """Check the controls' job options (ValueError for a bad number or shape, as for
    the other options; ImproperlyConfigured for a limiter ``LIMITS`` does not define)."""
    timeout = opts.get("timeout")
    why = None if timeout is None or timeout is False else number_problem("timeout", timeout)
    if why:
        raise ValueError(
            f"{where}: timeout must be a number of seconds > 0 (or False for none), got "
            f"{timeout!r}: {why}"
        )
    expires_in = opts.get("expires_in")
    why = None if expires_in is None else number_problem("expires_in", expires_in)
    if why:
        raise ValueError(
            f"{where}: expires_in must be a number of seconds > 0, got {expires_in!r}: {why}"
        )
    _check_database(where, opts.get("using_db"))
    limits = opts.get("limits")
    if limits is None:
        return
    if isinstance(limits, str) or not isinstance(limits, (list, tuple)):
        raise ValueError(f"{where}: limits must be a list of limiter names, got {limits!r}")
    if not all(isinstance(n, str) and n for n in limits):
        raise ValueError(f"{where}: limits must be a list of limiter names, got {limits!r}")
    check_names(where, limits)


def _check_database(where: str, using_db: Any) -> None:
    """``using_db`` (the durable outbox's and on_commit's database) names a database of
    ``DATABASES``: refused where it is written (``@job``, ``using()``), so `check` and the
    worker's start report a decorator's (the module fails to import), not a first enqueue.
    Skipped while Django's settings are not configured yet."""
    if using_db is None:
        return
    from django.conf import settings

    if not settings.configured:
        return
    databases = getattr(settings, "DATABASES", {}) or {}
    if not isinstance(using_db, str) or using_db not in databases:
        raise ValueError(
            f"{where}: using_db must name a database of DATABASES ({', '.join(databases)}), "
            f"got {using_db!r}"
        )


def check_names(where: str, names: Any) -> None:
    """ImproperlyConfigured naming the limiters ``COGWORKER["LIMITS"]`` lacks. Skipped
    while Django's settings are not configured yet (the worker checks at boot)."""
    from django.conf import settings

    if not settings.configured:
        return
    from .. import conf

    unknown = [n for n in dict.fromkeys(names) if n not in conf.get().LIMITS]
    if unknown:
        known = sorted(conf.get().LIMITS)
        raise ImproperlyConfigured(
            f"{where}: unknown limiter(s) {', '.join(map(repr, unknown))}; "
            f"COGWORKER['LIMITS'] defines {known or 'none'}."
        )


def check_registered_jobs(registered: Any) -> None:
    """At worker start: the ``limits`` of every registered job (``jobs.registered_jobs()``)
    name defined limiters."""
    for fn in registered:
        names = fn.options.get("limits")
        if names:
            check_names(f"@job on {fn.path}", names)


def payload_fields(opts: dict[str, Any], now: float, at: float | None) -> dict[str, Any]:
    """The payload fields of these options for a job enqueued at ``now`` to run at
    ``at`` (None: now)."""
    fields: dict[str, Any] = {}
    timeout = opts.get("timeout")
    if timeout is False:
        fields["timeout"] = 0
    elif timeout is not None:
        fields["timeout"] = timeout
    expires_in = opts.get("expires_in")
    if expires_in is not None:
        # From when it may first run: a job scheduled for later expires that long after.
        fields["expires_at"] = max(now, at or now) + expires_in
    limits = opts.get("limits")
    if limits:
        fields["limits"] = list(dict.fromkeys(limits))
    return fields


def run_timeout(job: dict[str, Any], default: float | None) -> float | None:
    """The time limit of a run of ``job``: its own, else ``DEFAULT_TIMEOUT``; None for
    none. A payload's odd value (hand-made) falls back to the default."""
    value = job.get("timeout")
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if value == 0:
        return None
    return float(value) if number_problem("timeout", value) is None else default
