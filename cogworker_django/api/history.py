"""``History``: recent job runs and their summary, read from the ``P:history`` stream
that ``cogworker_django.history`` writes. Filtering happens in Redis
(lua/history_scan.lua walks the stream newest first in slices and sends back only the
matching runs, or only durations for the summary).

(Over 400 lines: the pages of runs and the digest read the same stream in the same
slices, with the same stream-id arithmetic.)"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from ..history import background, dumps
from ..store import connection, errors, keys, runtime, scripts
from ._util import as_datetime, epoch, text

# "timeout", "cancelled" and "expired" come from the job controls (a timeout is a
# failure: counted as failed in the summaries).
STATUSES = ("success", "failed", "timeout", "cancelled", "expired")
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
    def wait(self) -> float | None:
        """Seconds from enqueue to the start of the run (None for runs recorded before
        waits were)."""
        return epoch(self.data.get("wait"))

    @property
    def error(self) -> str:
        if self.error_class:
            return f"{self.error_class}: {self.error_message}"
        return self._text("error_message")

    def __repr__(self) -> str:
        # Its fields live in ``data`` (a stream entry): shown by name, not as Run().
        shown = [
            f"jid={self.jid!r}",
            f"job={self.job!r}",
            f"queue={self.queue!r}",
            f"status={self.status!r}",
            f"started_at={self.started_at!r}",
            f"duration={self.duration!r}",
        ]
        if self.error:
            shown.append(f"error={self.error!r}")
        return f"Run({', '.join(shown)})"


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

    def digest(self, max_age: float = 0.0, wait: bool = True) -> Digest | None:
        """Per-job statistics over every retained run and per-minute trends over the
        last day, aggregated in Redis and kept up to date incrementally (:func:`digest`)."""
        return digest(max_age=max_age, wait=wait)

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
        "wait": _float(record.get("wait")),
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


# The digest: per-job statistics and trends, aggregated in Redis -------------------------

# Histogram bins per doubling of the duration: a percentile is known within about 2.2 %
# (half a bin), whatever the number of runs.
BINS_PER_DOUBLING = 16
ZERO_BIN = -100000  # lua/history_digest.lua: runs of zero seconds
DIGEST_BATCH = 2000
# Trend buckets: one minute wide, over the last day.
MINUTE_MS = 60_000
TREND_SPAN = 86400.0

_digest_lock = threading.Lock()


@dataclass(frozen=True)
class JobStats:
    """One job's runs over the retained history (percentiles from a log-scale histogram
    of the durations, within about 2.2 %)."""

    job: str
    runs: int
    failed: int
    mean: float | None
    p50: float | None
    p95: float | None
    p99: float | None

    @property
    def failure_rate(self) -> float:
        return self.failed / self.runs if self.runs else 0.0


@dataclass(frozen=True)
class Minute:
    """One minute of the trend (by when runs were recorded), UTC epoch seconds."""

    start: float
    runs: int = 0
    failed: int = 0
    duration_sum: float = 0.0
    duration_max: float = 0.0
    wait_sum: float = 0.0
    waits: int = 0
    wait_max: float = 0.0

    @property
    def mean_duration(self) -> float | None:
        return self.duration_sum / self.runs if self.runs else None

    @property
    def mean_wait(self) -> float | None:
        return self.wait_sum / self.waits if self.waits else None


@dataclass(frozen=True)
class Digest:
    jobs: list[JobStats]  # most runs first
    minutes: dict[float, Minute]  # start -> minute, only minutes with runs
    computed_at: float

    def trend(self, minutes: int, per: int = 1, now: float | None = None) -> list[Minute]:
        """The last ``minutes`` minutes (up to the current one) in buckets of ``per``
        minutes, oldest first, empty buckets included."""
        width = 60.0 * per
        now = self.computed_at if now is None else now
        last = now - now % width
        out = []
        for i in range(minutes // per - 1, -1, -1):
            start = last - i * width
            parts = [
                self.minutes[m] for m in (start + 60.0 * k for k in range(per)) if m in self.minutes
            ]
            out.append(_merge(start, parts))
        return out


def _merge(start: float, parts: list[Minute]) -> Minute:
    return Minute(
        start,
        runs=sum(p.runs for p in parts),
        failed=sum(p.failed for p in parts),
        duration_sum=sum(p.duration_sum for p in parts),
        duration_max=max((p.duration_max for p in parts), default=0.0),
        wait_sum=sum(p.wait_sum for p in parts),
        waits=sum(p.waits for p in parts),
        wait_max=max((p.wait_max for p in parts), default=0.0),
    )


def _bin_value(b: int) -> float:
    return 0.0 if b == ZERO_BIN else 2 ** ((b + 0.5) / BINS_PER_DOUBLING)


def _binned_percentile(bins: dict[int, int], total: int, pct: float) -> float | None:
    if not total:
        return None
    rank = max(1, -(-total * pct // 100))
    seen = 0
    for b in sorted(bins):
        seen += bins[b]
        if seen >= rank:
            return _bin_value(b)
    return None


class _Chunk:
    """The aggregates of one slice of the stream: entries ``oldest`` .. ``newest``."""

    __slots__ = ("newest", "oldest", "count", "jobs", "minutes")

    def __init__(self, reply: list[Any]) -> None:
        newest, oldest, count, jobs_part, buckets_part = reply
        self.newest, self.oldest = connection.text(newest), connection.text(oldest)
        self.count = int(count)
        self.jobs: dict[str, list[Any]] = {}  # job -> [runs, failed, duration sum, {bin: n}]
        for i in range(0, len(jobs_part), 5):
            flat = jobs_part[i + 4]
            self.jobs[connection.text(jobs_part[i])] = [
                int(jobs_part[i + 1]),
                int(jobs_part[i + 2]),
                float(jobs_part[i + 3]),
                {int(flat[k]): int(flat[k + 1]) for k in range(0, len(flat), 2)},
            ]
        # minute start (ms) -> (runs, failed, duration sum, duration max, wait sum, waits, wait max)
        self.minutes: dict[int, tuple[int, int, float, float, float, int, float]] = {}
        for i in range(0, len(buckets_part), 8):
            row = buckets_part[i : i + 8]
            self.minutes[int(row[0])] = (
                int(row[1]),
                int(row[2]),
                float(row[3]),
                float(row[4]),
                float(row[5]),
                int(row[6]),
                float(row[7]),
            )


def _id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _after(entry_id: str) -> str:
    ms, seq = _id(entry_id)
    return f"{ms}-{seq + 1}"


class _DigestState:
    """A prefix's digest kept up to date incrementally: the stream is read once in
    slices, then each refresh reads only the entries added since and drops (or re-reads)
    the slices the stream's cap has trimmed, so the aggregates stay those of the
    retained runs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.chunks: list[_Chunk] = []  # newest first, contiguous
        self.digest: Digest | None = None

    def _scan(self, conn: redis.Redis, high: str, low: str, since_ms: int) -> list[_Chunk]:
        chunks = []
        while high:
            reply = scripts.run(
                "history_digest",
                conn,
                [keys.history()],
                [high, low, DIGEST_BATCH, BINS_PER_DOUBLING, MINUTE_MS, since_ms],
            )
            chunk = _Chunk(reply)
            if not chunk.count:
                break
            chunks.append(chunk)
            high = _before(chunk.oldest) if chunk.count == DIGEST_BATCH else ""
        return chunks

    def refresh(self, conn: redis.Redis, now: float) -> Digest:
        since_ms = int((now - TREND_SPAN) * 1000)
        pipe = conn.pipeline(transaction=False)
        pipe.xrange(keys.history(), "-", "+", count=1)
        pipe.xrevrange(keys.history(), "+", "-", count=1)
        try:
            first, last = pipe.execute()
        except redis.ResponseError as exc:
            if "WRONGTYPE" not in errors.safe_str(exc):
                raise
            first = last = []  # the key guard moves it aside
        if not first:
            self.chunks = []
        else:
            first_id, last_id = connection.text(first[0][0]), connection.text(last[0][0])
            if self.chunks and _id(last_id) < _id(self.chunks[0].newest):
                self.chunks = []  # the stream was replaced: start again
            if not self.chunks:
                self.chunks = self._scan(conn, "+", "-", since_ms)
            else:
                newer = self._scan(conn, "+", _after(self.chunks[0].newest), since_ms)
                kept = []
                for chunk in self.chunks:
                    if _id(chunk.newest) < _id(first_id):
                        break  # trimmed away, and every older one too
                    if _id(chunk.oldest) < _id(first_id):
                        # Partly trimmed: read again what is left of it.
                        kept.extend(self._scan(conn, chunk.newest, first_id, since_ms))
                        break
                    kept.append(chunk)
                self.chunks = newer + kept
        self.digest = _summarise(self.chunks, now)
        return self.digest


def _summarise(chunks: list[_Chunk], now: float) -> Digest:
    per_job: dict[str, list[Any]] = {}
    minutes: dict[int, list[float]] = {}
    since_ms = int((now - TREND_SPAN) * 1000)
    for chunk in chunks:
        for name, (runs, failed, total, bins) in chunk.jobs.items():
            agg = per_job.setdefault(name, [0, 0, 0.0, {}])
            agg[0] += runs
            agg[1] += failed
            agg[2] += total
            for b, n in bins.items():
                agg[3][b] = agg[3].get(b, 0) + n
        for start, row in chunk.minutes.items():
            if start < since_ms:
                continue
            m = minutes.setdefault(start, [0, 0, 0.0, 0.0, 0.0, 0, 0.0])
            m[0] += row[0]
            m[1] += row[1]
            m[2] += row[2]
            m[3] = max(m[3], row[3])
            m[4] += row[4]
            m[5] += row[5]
            m[6] = max(m[6], row[6])
    jobs = []
    for name, (runs, failed, total, bins) in per_job.items():
        timed = sum(bins.values())
        jobs.append(
            JobStats(
                name,
                runs,
                failed,
                total / timed if timed else None,
                _binned_percentile(bins, timed, 50),
                _binned_percentile(bins, timed, 95),
                _binned_percentile(bins, timed, 99),
            )
        )
    jobs.sort(key=lambda j: (-j.runs, j.job))
    return Digest(
        jobs,
        {
            ms / 1000.0: Minute(
                ms / 1000.0, int(m[0]), int(m[1]), m[2], m[3], m[4], int(m[5]), m[6]
            )
            for ms, m in minutes.items()
        },
        now,
    )


class DigestStates(dict[str, _DigestState]):
    """This process's digest of each history stream (by key), kept on its runtime
    (store/runtime.py)."""


def _state() -> _DigestState:
    root = keys.history()
    states = runtime.current().of(DigestStates)
    with _digest_lock:
        state = states.get(root)
        if state is None:
            state = states[root] = _DigestState()
        return state


def digest(
    max_age: float = 0.0, *, wait: bool = True, conn: redis.Redis | None = None
) -> Digest | None:
    """Per-job statistics (runs, failures, mean and p50/p95/p99 duration) over every
    retained run, and per-minute runs, failures, durations and waits over the last day.

    Redis aggregates the stream in slices (lua/history_digest.lua) and sends back only
    the aggregates. This process keeps them per slice: the first call reads the whole
    stream; later calls read only what was added since, and drop what the stream's cap
    trimmed. With ``max_age`` > 0 a digest at most that old is returned without reading
    Redis. With ``wait=False`` the first reading happens in the background (a thread of
    history/background.py) and None is returned until it is done (a page stays fast
    whatever the history holds)."""
    state = _state()
    now = time.time()
    current = state.digest
    if max_age > 0 and current is not None and now - current.computed_at < max_age:
        return current
    if not wait and current is None:
        root_conn = conn or connection.get_client()

        def build() -> None:
            with state.lock:
                state.refresh(root_conn, time.time())

        # On the history's thread (history/background.py: one at a time, its failure
        # reported there): this layer only reads.
        background.builds().start(keys.history(), build)
        return None
    with state.lock:
        current = state.digest
        if max_age > 0 and current is not None and time.time() - current.computed_at < max_age:
            return current  # another thread refreshed it while this one waited
        return state.refresh(conn or connection.get_client(), time.time())
