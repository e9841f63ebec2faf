"""OpenTelemetry SDK set-up for the tracing tests: every finished span is appended as one
JSON line to a file, so a test can read what a worker process exported.

testproject/settings.py calls :func:`install` when ``TESTPROJECT_OTEL_SPANS`` names the
file (the worker subprocesses of tests/observe/test_tracing.py get it in their environment).
"""

import json
import threading

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class JSONLinesExporter(SpanExporter):
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def export(self, spans):
        lines = [json.dumps(as_dict(s)) + "\n" for s in spans]
        with self.lock, open(self.path, "a") as f:
            f.writelines(lines)
        return SpanExportResult.SUCCESS


def as_dict(span):
    ctx, parent = span.get_span_context(), span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{parent.span_id:016x}" if parent else None,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
    }


def install(path):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JSONLinesExporter(path)))
    trace.set_tracer_provider(provider)
