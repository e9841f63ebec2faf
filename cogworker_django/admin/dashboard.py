"""Dashboard: counters, queue sizes and latency, processes, set sizes, 30-day chart."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from ..api import Stats
from . import chart
from .base import PageAdmin

CHART_DAYS = 30


class DashboardAdmin(PageAdmin):
    def page(self, request: HttpRequest) -> HttpResponse:
        overview = Stats().overview(days=CHART_DAYS)
        return self.render(
            request,
            "dashboard.html",
            overview=overview,
            chart=chart.build(overview.days),
            chart_days=CHART_DAYS,
        )
