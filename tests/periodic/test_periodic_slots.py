"""Cron slots in an entry's zone, with a fixed clock (``now`` passed in): no Redis."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cogworker_django.periodic.slots import Cron, CronError, normalise


def _fired(cron: Cron, day: datetime, step: int = 600, hours: int = 24) -> list[datetime]:
    """Every distinct slot the ticker would see over the first ``hours`` of ``day`` (from
    local midnight), ticking every ``step`` seconds; asserts slots never go backwards."""
    start = day.timestamp()
    end = (day.replace(tzinfo=None) + timedelta(hours=hours)).replace(tzinfo=day.tzinfo)
    end = end.timestamp()
    seen: list[int] = []
    previous = None
    t = start
    while t < end:
        slot = cron.latest(t)
        assert slot <= t
        assert previous is None or slot >= previous, "a slot went backwards"
        previous = slot
        if slot >= start and (not seen or seen[-1] != slot):
            seen.append(slot)
        t += step
    return [datetime.fromtimestamp(s, day.tzinfo) for s in seen]


@pytest.mark.parametrize(
    "zone, spring, fall",
    [
        ("Europe/Paris", (2024, 3, 31), (2024, 10, 27)),
        ("America/New_York", (2024, 3, 10), (2024, 11, 3)),
    ],
)
def test_a_daily_0230_entry_fires_once_on_both_dst_days(zone, spring, fall):
    tz = ZoneInfo(zone)
    cron = Cron("30 2 * * *", zone)
    spring_runs = _fired(cron, datetime(*spring, tzinfo=tz))
    fall_runs = _fired(cron, datetime(*fall, tzinfo=tz))
    assert len(spring_runs) == 1, spring_runs
    assert len(fall_runs) == 1, fall_runs
    # 02:30 does not exist on the spring day: it fires when the gap ends.
    if zone == "Europe/Paris":
        assert spring_runs[0].strftime("%H:%M") == "03:00"
        assert fall_runs[0].isoformat() == "2024-10-27T02:30:00+02:00"  # the first 02:30


def test_fall_back_first_occurrence_with_seconds_field():
    tz = ZoneInfo("Europe/Paris")
    runs = _fired(Cron("15 30 2 * * *", "Europe/Paris"), datetime(2024, 10, 27, tzinfo=tz))
    assert [r.isoformat() for r in runs] == ["2024-10-27T02:30:15+02:00"]


def test_wildcard_hours_follow_real_time_across_dst():
    tz = ZoneInfo("Europe/Paris")
    hourly = Cron("0 * * * *", "Europe/Paris")
    assert len(_fired(hourly, datetime(2024, 3, 31, tzinfo=tz))) == 23
    assert len(_fired(hourly, datetime(2024, 10, 27, tzinfo=tz))) == 25
    # A fixed hour in the repeated hour fires once per wall time.
    fixed = Cron("*/10 2 * * *", "Europe/Paris")
    assert len(_fired(fixed, datetime(2024, 10, 27, tzinfo=tz), 60, hours=5)) == 6


def test_latest_and_next_with_a_fixed_clock():
    cron = Cron("* * * * * *", "UTC")
    assert cron.latest(100.0) == 100
    assert cron.latest(100.7) == 100
    assert cron.next(100.0) == 101
    assert cron.next(100.7) == 101
    five = Cron("*/5 * * * *", "UTC")
    assert five.latest(600.0) == 600
    assert five.latest(899.9) == 600
    assert five.next(600.0) == 900


def test_the_zone_decides_the_slot():
    now = datetime(2024, 6, 1, 12, 0, tzinfo=ZoneInfo("UTC")).timestamp()
    paris = Cron("0 3 * * *", "Europe/Paris").latest(now)
    tokyo = Cron("0 3 * * *", "Asia/Tokyo").latest(now)
    assert datetime.fromtimestamp(paris, ZoneInfo("UTC")).hour == 1  # 03:00 CEST
    assert datetime.fromtimestamp(tokyo, ZoneInfo("UTC")).hour == 18  # 03:00 JST


@pytest.mark.parametrize(
    "expr, normal",
    [
        ("0 3 * * *", "0 3 * * *"),
        ("  */5   * * * * * ", "*/5 * * * * *"),
        ("@daily", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_normalise(expr, normal):
    assert normalise(expr) == normal


@pytest.mark.parametrize("expr", ["", "* * * *", "* * * * * * *", "61 * * * *", "x * * * *", 5])
def test_bad_expressions(expr):
    with pytest.raises(CronError):
        normalise(expr)
