"""The dashboard's chart of processed and failed jobs per day, as numbers for an inline
SVG (no script, no CDN: the admin works offline). Only numbers reach the template."""

from __future__ import annotations

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
