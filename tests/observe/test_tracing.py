"""OpenTelemetry across enqueue and a real worker (COGWORKER["OTEL"] = True): the
enqueue's PRODUCER span is the parent of the worker's CONSUMER span, whose attributes
follow the messaging conventions; a failed run records its exception, each try is a
child of the same enqueue. The worker runs in this process (the context crosses Redis in
the payload, never a thread's context) and both sides export to the SDK's in-memory
exporter."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from testapp import jobs as tj
from testapp.otel_spans import as_dict

from cogworker_django import testing
from cogworker_django.observe import tracing
from cogworker_django.store import keys

from ..helpers import wait_until

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def sdk():
    """The SDK in this process (a provider can be set once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    yield


@pytest.fixture
def spans():
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@pytest.fixture
def traced_worker(inworker):
    inworker(queues=["work"], settings={"OTEL": True})
    return _exporter


def consumer_spans(exporter, jid: str, count: int = 1) -> list[dict]:
    def found():
        hits = [
            s
            for s in map(as_dict, exporter.get_finished_spans())
            if s["kind"] == "CONSUMER" and s["attributes"].get("messaging.message.id") == jid
        ]
        return hits if len(hits) >= count else None

    return wait_until(found, 30, interval=0.1, message=f"{count} consumer span(s) of {jid}")


def test_the_run_is_a_child_of_the_enqueue(traced_worker, spans):
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("request") as request:
        jid = tj.record.using(queue="work").enqueue("traced")
    request_ctx = request.get_span_context()
    (producer,) = [s for s in spans.get_finished_spans() if s.name == "send work"]
    assert producer.kind == trace.SpanKind.PRODUCER
    assert producer.parent.span_id == request_ctx.span_id
    assert producer.attributes["messaging.message.id"] == jid
    assert producer.attributes["messaging.operation.type"] == "send"

    (run,) = consumer_spans(traced_worker, jid)
    assert run["name"] == "process work"
    assert run["trace_id"] == f"{request_ctx.trace_id:032x}"
    assert run["parent_span_id"] == f"{producer.get_span_context().span_id:016x}"
    attrs = run["attributes"]
    assert attrs["messaging.system"] == "cogworker"
    assert attrs["messaging.destination.name"] == "work"
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["cogworker.job.name"] == "testapp.jobs.record"
    assert attrs["cogworker.job.retry_count"] == 0
    assert attrs["cogworker.job.outcome"] == "success"
    assert run["status"] == "UNSET"


def test_a_failed_run_records_its_exception_and_every_try_shares_the_parent(traced_worker, spans):
    with trace.get_tracer("tests").start_as_current_span("request"):
        jid = tj.always_fails.using(queue="work", retry=1).enqueue("traced failure")
    (producer,) = [s for s in spans.get_finished_spans() if s.name == "send work"]
    tries = consumer_spans(traced_worker, jid, count=2)
    parent = f"{producer.get_span_context().span_id:016x}"
    assert [t["parent_span_id"] for t in tries] == [parent, parent]
    assert [t["attributes"]["cogworker.job.outcome"] for t in tries] == ["retry", "dead"]
    assert [t["attributes"]["cogworker.job.retry_count"] for t in tries] == [0, 1]
    for t in tries:
        assert t["status"] == "ERROR"
        (event,) = [e for e in t["events"] if e["name"] == "exception"]
        assert event["attributes"]["exception.type"] == "ValueError"
        assert event["attributes"]["exception.message"] == "traced failure"


def test_outside_a_trace_nothing_is_carried_and_the_run_is_a_root(traced_worker, spans):
    jid = tj.record.using(queue="work").enqueue("untraced")
    # (The worker's own CONSUMER span lands in the same exporter.)
    assert [s for s in spans.get_finished_spans() if s.kind != trace.SpanKind.CONSUMER] == []
    (run,) = consumer_spans(traced_worker, jid)
    assert run["parent_span_id"] is None


def test_the_context_field_in_the_payload(configure, spans):
    with testing.fake():
        configure(OTEL=True)
        with trace.get_tracer("tests").start_as_current_span("request") as request:
            tj.record.enqueue("a")
        (job,) = tj.record.jobs
        carried = job[tracing.FIELD]
        assert f"{request.get_span_context().trace_id:032x}" in carried["traceparent"]
        configure(OTEL=False)
        with trace.get_tracer("tests").start_as_current_span("request"):
            tj.record.enqueue("b")
        assert tracing.FIELD not in tj.record.jobs[1]


def test_a_bulk_enqueue_carries_the_context_in_each_payload(configure, r, spans):
    """With OTEL on, a bulk enqueue goes through the client chain (not the plain bulk
    path, which has no middleware): each job carries the trace it was enqueued in."""
    configure(OTEL=True)
    with trace.get_tracer("tests").start_as_current_span("request") as request:
        tj.record.using(queue="traced-bulk").enqueue_many([("a",), ("b",)])
    trace_id = f"{request.get_span_context().trace_id:032x}"
    texts = r.lrange(keys.queue("traced-bulk"), 0, -1)
    assert len(texts) == 2
    for text in texts:
        assert trace_id in json.loads(text)[tracing.FIELD]["traceparent"]


def test_a_garbled_context_starts_a_root_span():
    assert tracing.carried_context({tracing.FIELD: "not a dict"}) is None
    assert tracing.carried_context({tracing.FIELD: {"traceparent": 7}}) is None
    assert tracing.carried_context({}) is None


def test_an_async_run_on_the_event_loop_is_a_child_of_the_enqueue(traced_worker, spans):
    from testapp import async_jobs as aj

    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("request") as request:
        jid = aj.where_am_i.using(queue="work").enqueue("traced-async")
    (producer,) = [s for s in spans.get_finished_spans() if s.name == "send work"]
    (run,) = consumer_spans(traced_worker, jid)
    assert run["trace_id"] == f"{request.get_span_context().trace_id:032x}"
    assert run["parent_span_id"] == f"{producer.get_span_context().span_id:016x}"
    assert run["attributes"]["cogworker.job.name"] == "testapp.async_jobs.where_am_i"
    assert run["attributes"]["cogworker.job.outcome"] == "success"
