"""OpenTelemetry traces across enqueue and run (``COGWORKER["OTEL"] = True``).

Only the OpenTelemetry *API* is used (the ``otel`` extra): the application installs the
SDK, its exporter and its propagators as it does for its web process; without them every
span here is a no-op.

- Enqueue: :class:`TraceContextMiddleware`, a client middleware the setting puts first
  in every push's chain. Inside a trace it starts a short PRODUCER span ``send <queue>``
  and injects its context (W3C ``traceparent``/``tracestate``, or whatever propagators
  the application set) into the payload field :data:`FIELD`; outside a trace the payload
  is left as it is (no root span per enqueue).
- Run: :func:`consumer_span`, used by the worker's built-in telemetry middleware
  (``cogworker_django.observe.telemetry``), starts a CONSUMER span ``process <queue>`` whose
  parent is the context found in the payload, with the messaging semantic conventions'
  attributes (``messaging.system`` = ``cogworker``, ``messaging.destination.name``,
  ``messaging.message.id`` = the jid, ``messaging.operation.type`` = ``process``) and
  the job's (``cogworker.job.name``, ``cogworker.job.retry_count``, and at its end
  ``cogworker.job.outcome``); a failed run records its exception and an ERROR status.

A retried run carries the same context (the field stays in the payload), so every try
is a child of the enqueue's span.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .. import __version__, conf
from ..core.middleware import ClientMiddleware

# The payload field carrying the trace context: {"traceparent": "...", ...}.
FIELD = "trace_context"
SYSTEM = "cogworker"
INSTRUMENTATION = "cogworker_django"


def enabled() -> bool:
    return conf.get().OTEL


def tracer() -> Any:
    """This package's tracer (a proxy until the application installs a provider)."""
    from opentelemetry import trace

    return trace.get_tracer(INSTRUMENTATION, __version__)


def _messaging(queue: str, jid: Any, operation: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }
    if isinstance(jid, str):
        attributes["messaging.message.id"] = jid
    return attributes


class TraceContextMiddleware(ClientMiddleware):
    """The client side: a PRODUCER span around the push, its context in the payload."""

    def __init__(self) -> None:
        self._tracer = tracer()

    def __call__(self, job: dict[str, Any], push: Callable[[dict], Any]) -> Any:
        from opentelemetry import propagate, trace

        if not trace.get_current_span().get_span_context().is_valid:
            return push(job)  # not inside a trace: nothing to carry
        queue = str(job.get("queue") or "")
        attributes = _messaging(queue, job.get("jid"), "send")
        if isinstance(job.get("func"), str):
            attributes["cogworker.job.name"] = job["func"]
        with self._tracer.start_as_current_span(
            f"send {queue}", kind=trace.SpanKind.PRODUCER, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            if carrier:
                job[FIELD] = carrier
            return push(job)


def carried_context(job: dict[str, Any]) -> Any:
    """The OpenTelemetry context carried by ``job`` (None when it carries none, or
    something that is not a dict of strings)."""
    carrier = job.get(FIELD)
    if not isinstance(carrier, dict) or not carrier:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in carrier.items()):
        return None
    from opentelemetry import propagate

    return propagate.extract(carrier)


class ConsumerSpan:
    """What :func:`consumer_span` yields: the span, and how the run ended."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def ended(self, outcome: str, exc: BaseException | None = None) -> None:
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("cogworker.job.outcome", outcome)
        if exc is not None:
            self.span.record_exception(exc)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))


@contextlib.contextmanager
def consumer_span(trace_tracer: Any, job: dict[str, Any], queue: str) -> Iterator[ConsumerSpan]:
    """A CONSUMER span for one run of ``job``, the current span for the run."""
    from opentelemetry import trace

    attributes = _messaging(queue, job.get("jid"), "process")
    if isinstance(job.get("func"), str):
        attributes["cogworker.job.name"] = job["func"]
    retry_count = job.get("retry_count")
    if isinstance(retry_count, int) and not isinstance(retry_count, bool):
        attributes["cogworker.job.retry_count"] = retry_count
    with trace_tracer.start_as_current_span(
        f"process {queue}",
        context=carried_context(job),
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,  # ConsumerSpan.ended records it, once
        set_status_on_exception=False,
    ) as span:
        yield ConsumerSpan(span)


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the current span, or None (no valid span, or no
    OpenTelemetry installed)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
