"""Dashboard: counters, queue sizes and latency, processes, set sizes, 30-day chart; and
"find a job": where one jid is now, across queues, schedule, retries, dead, in-progress
lists and history."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.urls import path, reverse

from ..api import Outbox, RedisServer, Results, Stats, find_job
from . import chart, live
from .base import PageAdmin

CHART_DAYS = 30

# Where a job was found -> (the page's model, what the page is called).
PLACES = {
    "queue": ("queue", "Queue"),
    "schedule": ("scheduledjob", "Scheduled"),
    "inprogress": ("process", "In progress"),
    "retry": ("retryjob", "Retries"),
    "dead": ("deadjob", "Dead"),
    "history": ("jobrun", "History"),
}


class DashboardAdmin(PageAdmin):
    def extra_urls(self, wrap):
        return [
            path("find/", wrap(self.find_view), name=self.url_name("find")),
            path("live.json", wrap(lambda r: live.view(self, r)), name=self.url_name("live")),
        ]

    def page(self, request: HttpRequest) -> HttpResponse:
        overview = Stats().overview(days=CHART_DAYS)
        return self.render(
            request,
            "dashboard.html",
            overview=overview,
            chart=chart.build(overview.days),
            chart_days=CHART_DAYS,
            find_url=self.reverse("find"),
            live=live.data_for(overview),
            live_url=self.reverse("live"),
            live_interval=live.LIVE_INTERVAL,
            live_pending_interval=live.PENDING_INTERVAL,
            persistence=RedisServer().persistence(),
            outboxes=Outbox().databases(),
        )

    def find_view(self, request: HttpRequest) -> HttpResponse:
        """Every place a jid is now. Each result is shown only to a user who may view
        the page it belongs to."""
        self.require(request, "view")
        jid = request.GET.get("jid", "").strip()

        def render() -> HttpResponse:
            results, error, hidden, kept = [], "", 0, None
            if jid:
                try:
                    found = find_job(jid)
                    kept = Results().of(jid)
                except ValueError as exc:
                    found, error = [], str(exc)
                for place in found:
                    model, label = PLACES[place.where]
                    # (request.user: as in PageAdmin.has_perm, base.py)
                    perm = f"{self.model._meta.app_label}.view_{model}"
                    if not request.user.has_perm(perm):  # type: ignore[union-attr]
                        hidden += 1
                        continue
                    results.append((place, label, self._link(place, model)))
            return self.render(
                request,
                "find.html",
                title=f"Find job {jid}" if jid else "Find a job",
                jid=jid,
                results=results,
                kept=kept,
                error=error,
                hidden=hidden,
                find_url=self.reverse("find"),
            )

        return self.guarded(request, render)

    def _link(self, place, model: str) -> str:
        site, app = self.admin_site.name, self.model._meta.app_label
        if place.where in ("schedule", "retry", "dead"):
            return reverse(f"{site}:{app}_{model}_job") + "?" + urlencode({"key": place.record.key})
        if place.where == "queue":
            return reverse(f"{site}:{app}_queue_jobs") + "?" + urlencode({"name": place.queue})
        if place.where == "inprogress":
            anchor = "" if place.alive else "#awaiting-recovery"
            return reverse(f"{site}:{app}_process_changelist") + anchor
        return reverse(f"{site}:{app}_jobrun_changelist") + "?" + urlencode({"job": place.run.job})
