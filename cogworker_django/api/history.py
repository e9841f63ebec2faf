"""``History``: recent job runs and their summary, read from the ``P:history`` stream
that ``cogworker_django.history`` writes. Filtering happens in Redis
(lua/history_scan.lua walks the stream newest first in slices and sends back only the
matching runs, or only durations for the summary)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from .. import connection, errors, keys, scripts
from ..history import dumps
from ._util import as_datetime, epoch, text

STATUSES = ("success", "failed")
# Stream ids come from the Redis clock, started_at from the worker's: time filters
# allow this much skew before skipping entries by id.
CLOCK_SKEW_MARGIN = 300.0
READ_BATCH = 1000


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
        rows = query(
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
        return summary(job=job or None)

    def runs_of(self, jid: str, count: int = 25) -> list[Run]:
        """The runs of one job id (each attempt is a run), newest first."""
        return [Run(dict(r)) for r in runs_of(jid, count)]


# Reading the stream ---------------------------------------------------------------


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError("history: since/until datetimes must be timezone-aware")
        return value.timestamp()
    return float(value)


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _decode(entry_id: Any, raw: Any) -> dict[str, Any]:
    """A stream entry's run; never raises (an entry not written here reads as blanks)."""
    try:
        record = json.loads(raw)
    except (TypeError, ValueError):
        record = None
    if not isinstance(record, dict):
        record = {}
    return {
        "id": connection.text(entry_id),
        "jid": _str(record.get("jid")) or "",
        "job": _str(record.get("job")) or "",
        "queue": _str(record.get("queue")) or "",
        "status": _str(record.get("status")) or "",
        "started_at": _float(record.get("started_at")),
        "duration": _float(record.get("duration")),
        "error_class": _str(record.get("error_class")),
        "error_message": _str(record.get("error_message")),
        "worker": _str(record.get("worker")) or "",
        "periodic": _str(record.get("periodic")),
    }


def _before(entry_id: str) -> str:
    """The stream id just below ``entry_id`` (exclusive ranges without Redis 6.2's "(")."""
    ms, _, seq = entry_id.partition("-")
    if int(seq or 0) > 0:
        return f"{ms}-{int(seq) - 1}"
    return f"{int(ms) - 1}-18446744073709551615" if int(ms) > 0 else ""


def _needle(name: str, value: str | None) -> str:
    # Exactly as the writer encodes the field (same encoder; "jid" comes first, so every
    # other field is preceded by a comma, and "periodic" ends the record).
    return f",{dumps(name)}:{dumps(value)}," if value is not None else ""


def _slices(
    conn: redis.Redis, mode: str, job: str | None, status: str | None, low: str = "-"
) -> Iterator[tuple[list[Any], int, int]]:
    """(items, runs matched, of which failed) for each slice of READ_BATCH entries, newest
    first, filtered in
    Redis (lua/history_scan.lua). A history key of the wrong type reads as empty (the key
    guard moves it aside)."""
    high = "+"
    args = [low, READ_BATCH, _needle("job", job), _needle("status", status), mode]
    while high:
        try:
            last, items, matched, failed = scripts.run(
                "history_scan", conn, [keys.history()], [high, *args]
            )
        except redis.ResponseError as exc:
            if "WRONGTYPE" in errors.safe_str(exc):
                return
            raise
        yield items, matched, failed
        high = _before(connection.text(last)) if last else ""


def runs_of(jid: str, count: int = 25, *, conn: redis.Redis | None = None) -> list[dict[str, Any]]:
    """The runs of job id ``jid``, newest first, at most ``count``: the whole retained
    stream is read in slices, filtered in Redis (the jid is the record's first field)."""
    conn = conn or connection.get_client()
    needle = "{" + f"{dumps('jid')}:{dumps(jid)},"
    out: list[dict[str, Any]] = []
    high = "+"
    while high and len(out) < count:
        try:
            last, items, _matched, _failed = scripts.run(
                "history_scan", conn, [keys.history()], [high, "-", READ_BATCH, needle, "", "runs"]
            )
        except redis.ResponseError as exc:
            if "WRONGTYPE" in errors.safe_str(exc):
                return out
            raise
        for entry_id, raw in zip(items[0::2], items[1::2], strict=True):
            out.append(_decode(entry_id, raw))
        high = _before(connection.text(last)) if last else ""
    return out[:count]


def query(
    job: str | None = None,
    status: str | None = None,
    since: Any = None,
    until: Any = None,
    start: int = 0,
    count: int = 50,
    *,
    conn: redis.Redis | None = None,
) -> list[dict[str, Any]]:
    """Runs, newest first, filtered by job (dotted path), status ("success"/"failed") and
    started_at within [since, until] (epoch seconds or aware datetimes); ``start`` and
    ``count`` page through the matches. Each run: jid, job, queue, status, started_at,
    duration, error_class, error_message, worker, periodic (and the stream ``id``)."""
    conn = conn or connection.get_client()
    low_t, high_t = _epoch(since), _epoch(until)
    # Stream ids are the Redis clock at write time, after the run started: older ids
    # than ``since`` (less the skew margin) cannot hold a match.
    low = "-" if low_t is None else str(max(0, int((low_t - CLOCK_SKEW_MARGIN) * 1000)))
    out: list[dict[str, Any]] = []
    skipped = 0
    for items, _matched, _failed in _slices(conn, "runs", job, status, low):
        for entry_id, raw in zip(items[0::2], items[1::2], strict=True):
            run = _decode(entry_id, raw)
            started = run["started_at"]
            if low_t is not None and (started is None or started < low_t):
                continue
            if high_t is not None and (started is None or started > high_t):
                continue
            if skipped < start:
                skipped += 1
                continue
            out.append(run)
            if len(out) >= count:
                return out
    return out


def _percentile(ordered: list[float], pct: float) -> float | None:
    """Nearest-rank percentile of an ascending list."""
    if not ordered:
        return None
    rank = max(1, -(-len(ordered) * pct // 100))  # ceil without floats drifting
    return ordered[int(rank) - 1]


def summary(job: str | None = None, *, conn: redis.Redis | None = None) -> dict[str, Any]:
    """Over every retained run (of ``job`` if given): count, failed, failure_rate (0..1),
    and p50/p95/p99 durations in seconds (None without runs). Redis reads every run, in
    slices, and sends back only durations and outcomes."""
    conn = conn or connection.get_client()
    durations: list[float] = []
    count = failed = 0
    for items, matched, failed_here in _slices(conn, "stats", job, None):
        count += matched
        failed += failed_here
        durations.extend(map(float, items))  # checked by the script: all numbers
    durations.sort()
    return {
        "count": count,
        "failed": failed,
        "failure_rate": failed / count if count else 0.0,
        "p50": _percentile(durations, 50),
        "p95": _percentile(durations, 95),
        "p99": _percentile(durations, 99),
    }
