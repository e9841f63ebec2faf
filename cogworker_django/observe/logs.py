"""JSON logs with the running job on every line (docs/observability.md has the recipe).

- :class:`JobContextFilter` gives every record it sees ``jid``, ``job`` and ``queue``:
  those of the job the logging thread is running (its whole run, the worker's own lines
  about it included), or empty strings outside a run; and, inside a valid
  OpenTelemetry span, ``trace_id`` and ``span_id``. Put it on a handler, so that it sees
  the records of every logger that reaches the handler.
- :class:`JSONFormatter` writes one JSON object per line: ``time`` (UTC, ISO 8601 with
  milliseconds), ``level``, ``logger``, ``message``, ``process``, ``thread``, the
  filter's fields when set, and ``exception`` (the formatted traceback) when there is
  one. Fields named in ``extra=`` are added too when they are JSON-friendly.

Only the standard library is used.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

CONTEXT_FIELDS = ("jid", "job", "queue")
TRACE_FIELDS = ("trace_id", "span_id")
# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_OURS = {*CONTEXT_FIELDS, *TRACE_FIELDS}


class JobContextFilter(logging.Filter):
    """Adds the running job's ``jid``, ``job``, ``queue`` (and the current span's ids) to
    each record; never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        from ..core.jobs import current_job

        job = current_job()
        if job:
            record.jid = _text(job.get("jid"))
            record.job = _text(job.get("func"))
            record.queue = _text(job.get("queue"))
        else:
            for name in CONTEXT_FIELDS:
                if not hasattr(record, name):
                    setattr(record, name, "")
        from .tracing import current_ids

        ids = current_ids()
        if ids is not None:
            record.trace_id, record.span_id = ids
        return True


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))


class JSONFormatter(logging.Formatter):
    """One JSON object per line (see the module's doc)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            "thread": record.threadName,
        }
        for name in (*CONTEXT_FIELDS, *TRACE_FIELDS):
            value = getattr(record, name, "")
            if value:
                out[name] = value
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in _OURS and name not in out and _jsonable(value):
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)
