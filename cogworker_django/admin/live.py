"""The live dashboard: ``live.json`` answers the dashboard's numbers, its queue and
process tables, per-job statistics and trend charts as JSON (numbers and texts only,
never markup), and ``cogworker_django/live.js`` polls it every :data:`LIVE_INTERVAL`
seconds, pausable. The dashboard renders the same data when it loads, so it works
without JavaScript too (as of its loading).

Per-job statistics and trends come from the run history's digest
(``api.History.digest``): aggregated in Redis, kept up to date incrementally by this
process; the first reading of a long history happens in the background, and the page
says so meanwhile.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import redis
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.html import strip_tags

from .. import conf
from ..api import History, Stats
from ..store import errors
from ..templatetags.cogworker_admin import percent, seconds, when
from . import chart

# Seconds between two polls of live.json; a digest of the history this recent is reused.
LIVE_INTERVAL = 5
# Seconds between polls while this process reads the history for the first time (in the
# background, usually well under a second): the statistics replace "Reading the run
# history" about as soon as they exist, not one whole LIVE_INTERVAL later.
PENDING_INTERVAL = 1
DIGEST_MAX_AGE = 4.0
# Per-job statistics shown, most runs first.
JOB_ROWS = 25
CHART_DAYS = 30
# (key, title, minutes shown, minutes per point). The titles say the time axis is in UTC
# (the legend names the lines only).
TRENDS = (
    ("hour", "last hour (times in UTC)", 60, 1),
    ("day", "last day, in 30-minute steps (times in UTC)", 1440, 30),
)


def view(page: Any, request: HttpRequest) -> HttpResponse:
    """live.json of the dashboard ``page`` (its view permission)."""
    page.require(request, "view")
    try:
        data = data_for(Stats().overview(days=CHART_DAYS))
    except redis.RedisError as exc:
        return JsonResponse(
            {"error": errors.describe(exc), "outage": errors.is_unavailable(exc)}, status=503
        )
    response = JsonResponse(data)
    response["Cache-Control"] = "no-store"
    return response


def _charts(digest: Any) -> list[dict[str, Any]]:
    charts = []
    for key, title, minutes, per in TRENDS:
        buckets = digest.trend(minutes, per)
        starts = [b.start for b in buckets]
        charts.append(
            {
                "id": f"throughput-{key}",
                "title": f"Runs per minute, {title}",
                "legend": [["runs", "runs"], ["failed", "failed"]],
                "chart": chart.trend(
                    starts,
                    {
                        "runs": [b.runs / per for b in buckets],
                        "failed": [b.failed / per for b in buckets],
                    },
                    lambda v: f"{v:g}",
                ),
            }
        )
        charts.append(
            {
                "id": f"latency-{key}",
                "title": f"Mean wait in queue and run duration, {title}",
                "legend": [["wait", "wait"], ["duration", "duration"]],
                "chart": chart.trend(
                    starts,
                    {
                        "wait": [b.mean_wait or 0.0 for b in buckets],
                        "duration": [b.mean_duration or 0.0 for b in buckets],
                    },
                    seconds,
                ),
            }
        )
    return charts


def _no_runs() -> str:
    """The statistics' empty state: the counters above count runs the history may not
    hold (recording turned off), so it says which."""
    s = conf.get()
    if s.HISTORY and s.HISTORY_MAX_RUNS > 0:
        return "No runs recorded yet."
    return (
        'The run history is off (COGWORKER["HISTORY"] or HISTORY_MAX_RUNS): runs are '
        "counted above but not recorded, so there are no per-job statistics."
    )


def data_for(overview: Any) -> dict[str, Any]:
    """Everything live.js updates: texts by element id, table rows, charts."""
    digest = History().digest(max_age=DIGEST_MAX_AGE, wait=False)
    numbers = {
        "processed-today": overview.processed_today,
        "failed-today": overview.failed_today,
        "processed-total": overview.processed,
        "failed-total": overview.failed,
        "enqueued": overview.enqueued,
        "busy-threads": f"{overview.busy} / {overview.concurrency}",
        "scheduled-size": overview.scheduled,
        "retry-size": overview.retries,
        "dead-size": overview.dead,
    }
    if hasattr(overview, "awaiting_recovery"):
        numbers["awaiting-recovery"] = overview.awaiting_recovery
    jobs = None
    if digest is not None:
        jobs = [
            {
                "job": j.job,
                "runs": j.runs,
                "failed": j.failed,
                "failure_rate": percent(j.failure_rate),
                "mean": seconds(j.mean),
                "p50": seconds(j.p50),
                "p95": seconds(j.p95),
                "p99": seconds(j.p99),
            }
            for j in digest.jobs[:JOB_ROWS]
        ]
    now = timezone.now()
    return {
        "numbers": numbers,
        "queues": [
            {
                "name": q.name,
                "size": q.size,
                "latency": seconds(q.latency),
                "state": "paused"
                if q.paused
                else ("no worker reads this queue" if not q.read else "active"),
            }
            for q in overview.queues
        ],
        "processes": [
            {
                "name": f"{p.hostname}:{p.pid}" + (f" [{p.tag}]" if p.tag else ""),
                "quiet": p.quiet,
                "busy": f"{p.busy} / {p.concurrency}",
                "beat": strip_tags(when(p.beat_at)),
            }
            for p in overview.processes
        ],
        "jobs": jobs,
        "no_runs": _no_runs(),
        "charts": _charts(digest) if digest is not None else [],
        "updated": timezone.localtime(now).strftime("%H:%M:%S"),
        "updated_at": now.astimezone(dt.UTC).isoformat(),
    }
