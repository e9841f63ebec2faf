"""The dashboard's chart of processed and failed jobs per day, as numbers for an inline
SVG (no script, no CDN: the admin works offline). Only numbers reach the template."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..api import DayStat

WIDTH = 720
HEIGHT = 220
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 12, 28  # margins for the axis labels


@dataclass
class Chart:
    width: int = WIDTH
    height: int = HEIGHT
    processed_points: str = ""
    failed_points: str = ""
    dots: list[dict] = field(default_factory=list)
    y_ticks: list[dict] = field(default_factory=list)
    x_labels: list[dict] = field(default_factory=list)
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    plot_bottom: int = HEIGHT - BOTTOM
    plot_top: int = TOP


def _nice_max(value: int) -> int:
    """A round axis maximum at or above ``value`` (1, 2, 5 x 10^n)."""
    if value <= 0:
        return 1
    magnitude = 1
    while True:
        for step in (1, 2, 5):
            if step * magnitude >= value:
                return step * magnitude
        magnitude *= 10


def build(days: list[DayStat]) -> Chart:
    chart = Chart()
    if not days:
        return chart
    top = _nice_max(max(max(d.processed, d.failed) for d in days))
    span_x = chart.plot_right - chart.plot_left
    span_y = chart.plot_bottom - chart.plot_top
    step = span_x / max(len(days) - 1, 1)

    def y(value: int) -> float:
        return round(chart.plot_bottom - span_y * value / top, 1)

    processed, failed = [], []
    for i, d in enumerate(days):
        x = round(chart.plot_left + i * step, 1)
        processed.append(f"{x},{y(d.processed)}")
        failed.append(f"{x},{y(d.failed)}")
        chart.dots.append(
            {
                "x": x,
                "yp": y(d.processed),
                "yf": y(d.failed),
                "date": d.date,
                "processed": d.processed,
                "failed": d.failed,
            }
        )
        if i % 5 == 0 or i == len(days) - 1:
            anchor = "end" if i == len(days) - 1 else "start" if i == 0 else "middle"
            chart.x_labels.append({"x": x, "date": d.date, "anchor": anchor})
    chart.processed_points = " ".join(processed)
    chart.failed_points = " ".join(failed)
    chart.y_ticks = [{"y": y(v), "value": v} for v in (0, top // 2 if top > 1 else 0, top)]
    chart.y_ticks = [t for i, t in enumerate(chart.y_ticks) if t not in chart.y_ticks[:i]]
    return chart


# Trends: a few series over time buckets (the live dashboard's charts) --------------------

TREND_WIDTH = 360
TREND_HEIGHT = 160
TREND_LEFT, TREND_RIGHT, TREND_TOP, TREND_BOTTOM = 52, 8, 10, 24


def trend(
    starts: list[float], series: dict[str, list[float]], label: Callable[[float], str]
) -> dict:
    """Plain numbers and texts for an inline SVG of ``series`` (name -> one value per
    bucket) over buckets starting at ``starts``; ``label`` formats an axis value. The
    same dict goes to the template and, as JSON, to the live refresh."""
    width, height = TREND_WIDTH, TREND_HEIGHT
    left, right = TREND_LEFT, width - TREND_RIGHT
    top, bottom = TREND_TOP, height - TREND_BOTTOM
    peak = max((v for values in series.values() for v in values), default=0.0)
    ceiling = float(_nice_max(math.ceil(peak))) if peak >= 1 else _nice_fraction(peak)
    step = (right - left) / max(len(starts) - 1, 1)

    def y(value: float) -> float:
        return round(bottom - (bottom - top) * value / ceiling, 1)

    lines = [
        {
            "name": name,
            "points": " ".join(f"{round(left + i * step, 1)},{y(v)}" for i, v in enumerate(values)),
        }
        for name, values in series.items()
    ]
    x_labels = []
    if starts:
        for i in (0, len(starts) // 2, len(starts) - 1):
            anchor = "start" if i == 0 else "end" if i == len(starts) - 1 else "middle"
            x_labels.append(
                {
                    "x": round(left + i * step, 1),
                    "text": time.strftime("%H:%M", time.gmtime(starts[i])),
                    "anchor": anchor,
                }
            )
    return {
        "width": width,
        "height": height,
        "plot_left": left,
        "plot_right": right,
        "plot_top": top,
        "plot_bottom": bottom,
        "lines": lines,
        "y_ticks": [{"y": y(v), "text": label(v)} for v in (0.0, ceiling / 2, ceiling)],
        "x_labels": x_labels,
    }


def _nice_fraction(value: float) -> float:
    """A round axis maximum for values below 1 (0.001 .. 1)."""
    for ceiling in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0):
        if value <= ceiling:
            return ceiling
    return 1.0
