"""``History``: recent job runs and their summary, over ``cogworker_django.history``
(loaded lazily, see optional.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from . import optional
from ._util import as_datetime, epoch, text

MODULE = "cogworker_django.history"
STATUSES = ("success", "failed")


@dataclass(frozen=True)
class Run:
    data: dict[str, Any] = field(repr=False)

    def _text(self, name: str) -> str:
        return text(self.data.get(name))

    jid = property(lambda self: self._text("jid"))
    job = property(lambda self: self._text("job"))
    queue = property(lambda self: self._text("queue"))
    status = property(lambda self: self._text("status"))
    error_class = property(lambda self: self._text("error_class"))
    error_message = property(lambda self: self._text("error_message"))
    worker = property(lambda self: self._text("worker"))
    periodic = property(lambda self: self._text("periodic"))

    @property
    def started_at(self) -> dt.datetime | None:
        value = self.data.get("started_at")
        if isinstance(value, dt.datetime):
            return value
        return as_datetime(value)

    @property
    def duration(self) -> float | None:
        return epoch(self.data.get("duration"))

    @property
    def error(self) -> str:
        if self.error_class:
            return f"{self.error_class}: {self.error_message}"
        return self.error_message


class History:
    @staticmethod
    def available() -> bool:
        return optional.available(MODULE, "query", "summary")

    def query(
        self,
        job: str | None = None,
        status: str | None = None,
        since: Any = None,
        until: Any = None,
        start: int = 0,
        count: int = 50,
    ) -> list[Run]:
        """Runs newest first, filtered by job name and status ("success"/"failed")."""
        fn = optional.function(MODULE, "query")
        rows = fn(
            job=job or None,
            status=status or None,
            since=since,
            until=until,
            start=start,
            count=count,
        )
        return [Run(dict(r)) for r in rows]

    def summary(self, job: str | None = None) -> dict[str, Any]:
        """count, failure_rate and p50/p95/p99 durations (of ``job``, or of every run)."""
        return dict(optional.function(MODULE, "summary")(job=job or None))
