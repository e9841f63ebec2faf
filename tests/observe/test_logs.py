"""JSON logs with jid/job/queue on every line a run produces: the filter and formatter
alone. (The LOGGING recipe of docs/observability.md in a real worker:
tests/worker/test_worker_command.py.)"""

from __future__ import annotations

import json
import logging

from opentelemetry import trace

from cogworker_django.core import jobs
from cogworker_django.observe import logs


def _record(msg: str = "hello %s", *args, **kw) -> logging.LogRecord:
    return logging.makeLogRecord({"name": "app", "msg": msg, "args": args or ("x",), **kw})


def test_the_filter_adds_the_running_job():
    f = logs.JobContextFilter()
    outside = _record()
    assert f.filter(outside) is True
    assert (outside.jid, outside.job, outside.queue) == ("", "", "")
    job = {"jid": "abc123", "func": "app.jobs.send", "queue": "mail"}
    with jobs.running(job):
        inside = _record()
        f.filter(inside)
    assert (inside.jid, inside.job, inside.queue) == ("abc123", "app.jobs.send", "mail")


def test_the_formatter_writes_one_json_object():
    f, formatter = logs.JobContextFilter(), logs.JSONFormatter()
    with jobs.running({"jid": "j1", "func": "app.jobs.f", "queue": "q"}):
        record = _record("sent %d mails", 3, levelname="WARNING", levelno=30)
        record.tenant = "acme"  # as extra= would set it
        f.filter(record)
    line = formatter.format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "sent 3 mails"
    assert (data["jid"], data["job"], data["queue"]) == ("j1", "app.jobs.f", "q")
    assert data["level"] == "WARNING" and data["logger"] == "app"
    assert data["tenant"] == "acme"
    assert data["time"].endswith("+00:00")
    plain = _record()
    f.filter(plain)
    assert "jid" not in json.loads(formatter.format(plain))


def test_exceptions_and_span_ids():
    from opentelemetry.sdk.trace import TracerProvider

    provider = trace.get_tracer_provider()
    tracer = (provider if isinstance(provider, TracerProvider) else TracerProvider()).get_tracer(
        "tests"
    )
    f, formatter = logs.JobContextFilter(), logs.JSONFormatter()
    try:
        raise ValueError("bad")
    except ValueError:
        import sys

        record = _record(exc_info=sys.exc_info())
    with tracer.start_as_current_span("s") as span:
        f.filter(record)
    data = json.loads(formatter.format(record))
    assert "ValueError: bad" in data["exception"]
    assert data["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert data["span_id"] == f"{span.get_span_context().span_id:016x}"
