"""The job controls' settings: ``LIMITS`` (each limiter a :class:`LimitSpec`) and
``DEFAULT_TIMEOUT``, checked for conf.py (which passes in its own name check: this module
imports nothing of the package, so conf can import it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

LIMIT_FIELDS = ("concurrency", "rate", "per")


def positive_seconds(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and value > 0
    )


def _count(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value > 0


@dataclass(frozen=True)
class LimitSpec:
    """One limiter of ``COGWORKER["LIMITS"]``: at most ``concurrency`` runs at once and
    at most ``rate`` starts in any ``per`` seconds (None: no such bound)."""

    name: str
    concurrency: int | None = None
    rate: int | None = None
    per: float | None = None


def parse_limits(value: Any, valid_name: Callable[[Any], bool]) -> dict[str, LimitSpec]:
    """``COGWORKER["LIMITS"]`` validated; ImproperlyConfigured naming what is wrong."""

    def bad(what: str, shown: Any, why: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(f"COGWORKER['LIMITS']{what} = {shown!r} is invalid: {why}.")

    if not isinstance(value, dict):
        raise bad(
            "", value, 'expected a dict of name -> {"concurrency": N} / {"rate": N, "per": S}'
        )
    specs = {}
    for name, spec in value.items():
        if not valid_name(name):
            raise bad("", name, "a limiter name must be a non-empty string without whitespace")
        where = f"[{name!r}]"
        if not isinstance(spec, dict) or not spec:
            raise bad(where, spec, 'expected {"concurrency": N} or {"rate": N, "per": S}')
        unknown = sorted(set(spec) - set(LIMIT_FIELDS), key=str)
        if unknown:
            raise bad(where, spec, f"unknown field(s) {unknown}; allowed: {list(LIMIT_FIELDS)}")
        concurrency, rate, per = spec.get("concurrency"), spec.get("rate"), spec.get("per")
        if concurrency is not None and not _count(concurrency):
            raise bad(f"{where}['concurrency']", concurrency, "expected an integer >= 1")
        if (rate is None) != (per is None):
            raise bad(where, spec, '"rate" and "per" go together (N starts per S seconds)')
        if rate is not None and not _count(rate):
            raise bad(f"{where}['rate']", rate, "expected an integer >= 1")
        if per is not None and not positive_seconds(per):
            raise bad(f"{where}['per']", per, "expected a number of seconds > 0")
        if concurrency is None and rate is None:
            raise bad(where, spec, 'expected "concurrency", or "rate" with "per"')
        specs[name] = LimitSpec(name, concurrency, rate, float(per) if per is not None else None)
    return specs


def check_default_timeout(value: Any) -> None:
    if value is not None and not positive_seconds(value):
        raise ImproperlyConfigured(
            f"COGWORKER['DEFAULT_TIMEOUT'] = {value!r} is invalid: expected a number of "
            "seconds > 0, or None (no time limit)."
        )
