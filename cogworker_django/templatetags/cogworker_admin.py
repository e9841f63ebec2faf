"""Template filters of the Cogworker admin pages: times, durations, sizes.

Every filter escapes what it outputs (format_html) or returns plain text for the
template to escape.
"""

from __future__ import annotations

import datetime as dt

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince, timeuntil

register = template.Library()


@register.filter
def when(value: dt.datetime | None) -> str:
    """``<time>`` with the relative time shown and the full local time as its title."""
    if not isinstance(value, dt.datetime):
        return "–"
    now = timezone.now()
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    delta = (value - now).total_seconds()
    if abs(delta) < 1:
        relative = "just now"
    elif abs(delta) < 60:  # timesince would say "0 minutes"
        relative = f"{int(-delta)} s ago" if delta < 0 else f"in {int(delta)} s"
    elif delta < 0:
        relative = f"{timesince(value, now)} ago"
    else:
        relative = f"in {timeuntil(value, now)}"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        relative,
    )


@register.filter
def seconds(value: float | int | None) -> str:
    """A duration: ``850 ms``, ``12.5 s``, ``3 min 4 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if value is None or isinstance(value, bool):
        return "–"
    try:
        s = float(value)
    except (TypeError, ValueError):
        return "–"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    minutes, secs = divmod(int(s), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@register.filter
def kilobytes(value: int | None) -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return "–"
    if value < 1024:
        return f"{value} KB"
    if value < 1024 * 1024:
        return f"{value / 1024:.1f} MB"
    return f"{value / 1024 / 1024:.2f} GB"


@register.filter
def percent(value: float | None) -> str:
    if value is None:
        return "–"
    try:
        return f"{float(value) * 100:.1f} %"
    except (TypeError, ValueError):
        return "–"


@register.filter
def get_item(mapping: dict, key: str):
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def dotted(value: object) -> str:
    """A dotted path that a narrow column wraps after its dots only (``<wbr>``), never
    inside a name: ``demo.jobs.flaky`` may become ``demo.jobs.`` / ``flaky``, never
    ``demo.jobs.flak`` / ``y``. Each part is escaped."""
    parts = str(value).split(".")
    return format_html_join(mark_safe(".<wbr>"), "{}", ((part,) for part in parts))
