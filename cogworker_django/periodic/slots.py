"""Cron slots: when an entry is due, computed in the entry's own time zone.

A *slot* is the whole-second epoch at which a cron expression matches the wall clock
of the entry's zone. The ticker only ever looks at the latest slot at or before now
(never at every missed one). Both functions take ``now`` so tests can use a fixed clock.

Daylight saving time (see docs/periodic.md):
- a wall time that does not exist (spring forward) fires once, when the gap ends
  (a daily 02:30 entry runs at 03:00 that day);
- a wall time that happens twice (fall back) fires once, at its first occurrence,
  when the hour field is fixed ("30 2 * * *"); with a wildcard hour ("0 * * * *",
  "*/10 * * * *") entries follow real time and fire in both copies of the hour, as
  Vixie cron does, so an every-ten-minutes entry never pauses for an hour.
"""

from __future__ import annotations

import math
from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter

from ..store.errors import CogworkerError

# The aliases users know from crontab(5); expanded here because croniter treats some
# of them differently depending on other options.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Walking back over skipped repeats can take at most a few steps (one repeated hour);
# the bound only guards against a croniter surprise looping forever.
_MAX_STEPS = 10_000


class CronError(CogworkerError, ValueError):
    """The cron expression is not one we run (the message says why)."""


def normalise(expr: str) -> str:
    """The expression with aliases expanded and whitespace collapsed; CronError when
    it is not 5 fields, or 6 with seconds first, that croniter accepts."""
    if not isinstance(expr, str) or not expr.strip():
        raise CronError("expected a cron expression such as '0 3 * * *'")
    text = " ".join(expr.split())
    text = ALIASES.get(text.lower(), text)
    n = len(text.split(" "))
    if n not in (5, 6):
        raise CronError(
            f"expected 5 fields (minute hour day month weekday) or 6 with seconds first, got {n}"
        )
    try:
        croniter(text, 0, second_at_beginning=(n == 6))
    except Exception as exc:  # noqa: BLE001 - croniter raises several kinds
        raise CronError(str(exc)) from None
    return text


class Cron:
    """A parsed expression in a zone, answering "latest slot" and "next slot"."""

    def __init__(self, expr: str, zone: str) -> None:
        self.expr = normalise(expr)
        fields = self.expr.split(" ")
        self.has_seconds = len(fields) == 6
        self.zone = ZoneInfo(zone)
        hour = fields[2] if self.has_seconds else fields[1]
        # A fixed hour fires once in a repeated (fall-back) hour; a wildcard hour follows
        # real time (module docstring).
        self.real_time = hour.startswith("*")

    def _iter(self, start: float) -> croniter:
        when = datetime.fromtimestamp(start, self.zone)
        return croniter(self.expr, when, ret_type=datetime, second_at_beginning=self.has_seconds)

    def _repeat(self, t: datetime) -> bool:
        """True when ``t`` is the second occurrence of its wall time (fall back)."""
        if self.real_time:
            return False
        epoch = t.timestamp()
        wall = datetime.fromtimestamp(epoch, self.zone).replace(tzinfo=None)
        return wall.replace(tzinfo=self.zone, fold=0).timestamp() < epoch

    def latest(self, now: float) -> int:
        """The latest slot at or before ``now`` (epoch seconds)."""
        # croniter's get_prev is strict: start one second past now's whole second.
        it = self._iter(math.floor(now) + 1)
        for _ in range(_MAX_STEPS):
            t = it.get_prev(datetime)
            if not self._repeat(t):
                return int(t.timestamp())
        raise CronError(f"no slot found before {now} for {self.expr!r}")

    def next(self, now: float) -> int:
        """The first slot strictly after ``now``."""
        it = self._iter(math.floor(now))
        for _ in range(_MAX_STEPS):
            t = it.get_next(datetime)
            if not self._repeat(t) and t.timestamp() > now:
                return int(t.timestamp())
        raise CronError(f"no slot found after {now} for {self.expr!r}")
