"""Prometheus metrics of the whole deployment, read from Redis: a Django view.

    # urls.py
    from cogworker_django import metrics
    urlpatterns += [path("metrics", metrics.view)]

The view answers the Prometheus text format (or OpenMetrics, when the scraper asks for
it) from one :class:`~cogworker_django.api.snapshot.Snapshot`: a fixed number of round
trips to Redis whatever the number of queues. With ``COGWORKER["METRICS_TOKEN"]`` set it
wants ``Authorization: Bearer <token>``: 401 without it, 403 with another token (compared
in constant time). Redis away answers 503, so the scrape's ``up`` is 0.

Each worker serves its own process metrics (``manage.py cogworker --metrics-port``):
see ``cogworker_django.observe.telemetry``. ``prometheus_client`` comes with the ``metrics``
extra (``pip install 'cogworker-django[metrics]'``); it is imported on first use.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

import redis
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from . import conf
from .store import errors

NEEDS = "the metrics need prometheus_client: pip install 'cogworker-django[metrics]'"


def prometheus() -> Any:
    """The ``prometheus_client`` module; ImproperlyConfigured naming the extra without it."""
    try:
        import prometheus_client
    except ImportError:
        raise ImproperlyConfigured(NEEDS) from None
    return prometheus_client


def authorization_problem(header: str | None, token: str | None) -> int | None:
    """None when ``header`` (the Authorization header) is acceptable for ``token``;
    else the status to answer: 401 (no bearer token given), 403 (another token)."""
    if not token:
        return None
    scheme, _, given = (header or "").strip().partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        return 401
    if not hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
        return 403
    return None


class SnapshotCollector:
    """A prometheus_client collector yielding the metric families of one snapshot."""

    def __init__(self, snapshot: Any) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self.snapshot
        size = GaugeMetricFamily(
            "cogworker_queue_size", "Jobs waiting in the queue.", labels=["queue"]
        )
        latency = GaugeMetricFamily(
            "cogworker_queue_latency_seconds",
            "How long the oldest job of the queue has waited (0 when the queue is empty).",
            labels=["queue"],
        )
        paused = GaugeMetricFamily(
            "cogworker_queue_paused", "1 while the queue is paused, else 0.", labels=["queue"]
        )
        for q in s.queues:
            size.add_metric([q.name], q.size)
            latency.add_metric([q.name], q.latency or 0.0)
            paused.add_metric([q.name], 1 if q.paused else 0)
        yield from (size, latency, paused)
        for name, value, text in (
            ("cogworker_scheduled_size", s.scheduled, "Jobs scheduled to run later."),
            ("cogworker_retry_size", s.retries, "Failed jobs waiting for a retry."),
            ("cogworker_dead_size", s.dead, "Jobs in the dead set."),
            ("cogworker_processes", len(s.processes), "Live worker processes."),
            ("cogworker_busy", s.busy, "Processor threads running a job, over every process."),
            ("cogworker_concurrency", s.concurrency, "Processor threads, over every process."),
            ("cogworker_quarantined_keys", s.quarantined, "Keys the key guard moved aside."),
        ):
            yield GaugeMetricFamily(name, text, value=value)
        yield CounterMetricFamily(
            "cogworker_processed", "Jobs that succeeded (flushed by each heartbeat).", s.processed
        )
        yield CounterMetricFamily(
            "cogworker_failed", "Failed runs (flushed by each heartbeat).", s.failed
        )
        last = GaugeMetricFamily(
            "cogworker_periodic_last_run_timestamp_seconds",
            "When the periodic entry's last claimed slot was due (absent before its first).",
            labels=["entry"],
        )
        upcoming = GaugeMetricFamily(
            "cogworker_periodic_next_run_timestamp_seconds",
            "When the periodic entry's next slot is due.",
            labels=["entry"],
        )
        enabled = GaugeMetricFamily(
            "cogworker_periodic_enabled", "1 while the periodic entry fires.", labels=["entry"]
        )
        for entry in s.periodic:
            if entry.last_run is not None:
                last.add_metric([entry.name], entry.last_run.timestamp())
            if entry.next_run is not None:
                upcoming.add_metric([entry.name], entry.next_run.timestamp())
            enabled.add_metric([entry.name], 1 if entry.enabled else 0)
        yield from (last, upcoming, enabled)


class OutboxCollector:
    """The durable enqueue's outboxes (api.Outbox): rows waiting, and the oldest's age."""

    def __init__(self, outboxes: Any) -> None:
        self.outboxes = outboxes

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        size = GaugeMetricFamily(
            "cogworker_outbox_size",
            "Durable jobs written in the database and not yet pushed to Redis.",
            labels=["database"],
        )
        age = GaugeMetricFamily(
            "cogworker_outbox_oldest_age_seconds",
            "How long the oldest row of the outbox has waited (0 when it is empty).",
            labels=["database"],
        )
        for o in self.outboxes:
            if not o.error:
                size.add_metric([o.database], o.size)
                age.add_metric([o.database], o.oldest_age or 0.0)
        yield from (size, age)


def render(snapshot: Any, accept: str | None = None, outboxes: Any = ()) -> tuple[bytes, str]:
    """(body, content type) of ``snapshot`` (and the durable ``outboxes``) in the format
    ``accept`` asks for."""
    pc = prometheus()
    from prometheus_client.exposition import choose_encoder

    registry = pc.CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    registry.register(OutboxCollector(outboxes))
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


@never_cache
@require_safe
def view(request: HttpRequest) -> HttpResponse:
    """The deployment's metrics in the Prometheus text format (see the module's doc)."""
    prometheus()  # a missing extra is a configuration error, raised before anything else
    status = authorization_problem(request.META.get("HTTP_AUTHORIZATION"), conf.get().METRICS_TOKEN)
    if status == 401:
        response = HttpResponse(
            "a bearer token is required\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="cogworker metrics"'
        return response
    if status == 403:
        return HttpResponse("wrong token\n", status=403, content_type="text/plain")
    from .api.snapshot import Snapshot

    try:
        snapshot = Snapshot.read()
    except redis.RedisError as exc:
        return HttpResponse(
            f"Redis can't answer: {errors.describe(exc)}\n",
            status=503,
            content_type="text/plain",
        )
    from .api.outbox import Outbox

    body, content_type = render(snapshot, request.META.get("HTTP_ACCEPT"), Outbox().databases())
    return HttpResponse(body, content_type=content_type)
