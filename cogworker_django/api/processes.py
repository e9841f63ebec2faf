"""``ProcessSet`` (live worker processes) and ``Workers`` (what their threads run now).

A process is live while its presence hash ``P:process:<id>`` exists (the heartbeat
renews its TTL every beat). Members of ``P:processes`` without one are processes that
died without cleaning up: they are skipped, and removed from the set (best-effort; a
process that beats again adds itself back).

Quiet and stop are published on ``P:signal:<id>``; the process's subscriber reacts
within about a second, and its next beat shows the new state.

``AwaitingRecovery`` lists the in-progress lists ``P:inprogress:<id>`` whose process has
no presence key any more (it died, or was killed, with jobs taken): those jobs are in no
queue or set until a live worker's orphan recovery requeues them, which it does once the
process has missed its beats for ``ORPHAN_THRESHOLD`` (rule 13, worker/recovery.py).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field, replace
from typing import Any

from .. import conf
from ..store import errors, homes, keys
from ._util import as_datetime, client, epoch, text
from .records import JobRecord
from .results import Results, percent

# Jobs of one dead process read for a listing (the list itself may be longer).
ORPHAN_JOBS_SHOWN = 25


@dataclass(frozen=True)
class ProcessRecord:
    identity: str
    info: dict[str, Any] = field(repr=False)
    busy: int = 0
    quiet: bool = False
    beat: float | None = None

    @classmethod
    def from_hash(cls, identity: str, data: dict[bytes, bytes]) -> ProcessRecord:
        fields = {text(k): text(v) for k, v in data.items()}
        try:
            info = json.loads(fields.get("info") or "{}")
        except ValueError:
            info = {}
        if not isinstance(info, dict):
            info = {}
        try:
            busy = int(fields.get("busy") or 0)
        except ValueError:
            busy = 0
        return cls(
            identity,
            info,
            busy,
            fields.get("quiet") == "true",
            epoch(fields.get("beat")),
        )

    def _info(self, name: str) -> Any:
        return self.info.get(name)

    @property
    def hostname(self) -> str:
        return text(self._info("hostname"))

    @property
    def pid(self) -> int | None:
        value = self._info("pid")
        return value if isinstance(value, int) else None

    @property
    def tag(self) -> str:
        return text(self._info("tag"))

    @property
    def concurrency(self) -> int | None:
        value = self._info("concurrency")
        return value if isinstance(value, int) else None

    @property
    def queues(self) -> list[str]:
        value = self._info("queues")
        return [text(q) for q in value] if isinstance(value, list) else []

    @property
    def fetch(self) -> str:
        return text(self._info("fetch"))

    @property
    def version(self) -> str:
        return text(self._info("version"))

    @property
    def rss_kb(self) -> int | None:
        value = self._info("rss_kb")
        return value if isinstance(value, int) else None

    @property
    def recycling(self) -> str:
        """Why the process is recycling (``--max-jobs`` / ``--max-memory``: it fetches no
        more and exits once its running jobs end), "" when it isn't."""
        return text(self._info("recycling"))

    @property
    def started_at(self) -> dt.datetime | None:
        return as_datetime(self._info("started_at"))

    @property
    def beat_at(self) -> dt.datetime | None:
        return as_datetime(self.beat)


class ProcessSet:
    def identities(self) -> list[str]:
        return sorted(text(m) for m in client().smembers(keys.processes()))

    def list(self) -> list[ProcessRecord]:
        """Live processes by hostname and pid, in two round trips."""
        idents = self.identities()
        if not idents:
            return []
        conn = client()
        pipe = conn.pipeline(transaction=False)
        for ident in idents:
            pipe.hgetall(keys.process(ident))
        replies = pipe.execute(raise_on_error=False)
        live, stale = [], []
        for ident, data in zip(idents, replies, strict=True):
            if isinstance(data, dict) and data:
                live.append(ProcessRecord.from_hash(ident, data))
            elif isinstance(data, dict):
                stale.append(ident)
        if stale:
            errors.best_effort(
                "Process listing", lambda: conn.srem(keys.processes(), *stale), "pruning"
            )
        return sorted(live, key=lambda p: (p.hostname, p.pid or 0, p.identity))

    def size(self) -> int:
        return len(self.list())

    def get(self, identity: str) -> ProcessRecord | None:
        data = client().hgetall(keys.process(identity))
        return ProcessRecord.from_hash(identity, data) if data else None

    def quiet(self, identity: str) -> int:
        """Ask the process to stop fetching (running jobs go on). Returns how many
        subscribers got the message (0: the process is gone or not listening)."""
        return int(client().publish(keys.signal(identity), "quiet"))

    def stop(self, identity: str) -> int:
        """Ask the process to shut down gracefully (as on TERM: nothing is lost)."""
        return int(client().publish(keys.signal(identity), "stop"))


@dataclass(frozen=True)
class BusyJob:
    identity: str
    thread: str
    queue: str
    run_at: float | None
    record: JobRecord
    hostname: str = ""
    pid: int | None = None
    progress: dict[str, Any] | None = None  # the job's last progress report

    @property
    def started_at(self) -> dt.datetime | None:
        return as_datetime(self.run_at)

    @property
    def percent(self) -> float | None:
        return percent(self.progress)


class Workers:
    """The jobs running right now, from each live process's ``P:work:<id>`` snapshot
    (written every beat, so a job shorter than a beat may never appear)."""

    def list(self) -> list[BusyJob]:
        processes = ProcessSet().list()
        if not processes:
            return []
        conn = client()
        pipe = conn.pipeline(transaction=False)
        for p in processes:
            pipe.hgetall(keys.work(p.identity))
        replies = pipe.execute(raise_on_error=False)
        out = []
        for p, data in zip(processes, replies, strict=True):
            if not isinstance(data, dict):
                continue
            for thread, value in data.items():
                out.append(_busy_job(p, text(thread), value))
        reports = Results().progress_of(b.record.jid for b in out)
        if reports:
            out = [replace(b, progress=reports.get(b.record.jid)) for b in out]
        return sorted(out, key=lambda b: (b.run_at or 0.0, b.identity, b.thread))

    def size(self) -> int:
        return len(self.list())


def _busy_job(p: ProcessRecord, thread: str, value: bytes) -> BusyJob:
    try:
        entry = json.loads(value)
    except ValueError:
        entry = None
    if not isinstance(entry, dict):
        entry = {"payload": text(value)}
    queue = text(entry.get("queue"))
    raw = entry.get("payload")
    raw = raw if isinstance(raw, str) else text(raw)
    return BusyJob(
        p.identity,
        thread,
        queue,
        epoch(entry.get("run_at")),
        JobRecord.from_raw(_raw_bytes(raw), None, "busy", queue or None),
        p.hostname,
        p.pid,
    )


def _raw_bytes(raw: str) -> bytes:
    # The worker decoded the payload with surrogateescape: undo it to get its bytes.
    try:
        return raw.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return raw.encode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class OrphanedProcess:
    """A process gone without its presence key whose in-progress list still holds jobs,
    or that claimed periodic slots it never pushed (``claims``: orphan recovery pushes
    their jobs, docs/periodic.md).

    Times are on Redis's clock, as the worker's recovery judges them: ``last_beat`` is
    the process's last stamp (None when it has none), ``now`` when this was read, and
    ``recover_at`` the earliest a live worker requeues the jobs, ``last_beat`` (whole
    seconds, so + 1) + ``ORPHAN_THRESHOLD``. A worker that just started, or just saw
    Redis stall, waits a full threshold from then (rule 13), and passes run every
    ``ORPHAN_CHECK_INTERVAL``: so it is "not before", not "exactly at"."""

    identity: str
    size: int  # jobs in the in-progress list
    jobs: list[JobRecord]  # the first ORPHAN_JOBS_SHOWN of them
    last_beat: float | None
    now: float
    threshold: float
    claims: int = 0  # periodic slots it claimed and never pushed

    @property
    def recover_at(self) -> float | None:
        if self.last_beat is None:
            return None
        return self.last_beat + 1.0 + self.threshold

    @property
    def recover_in(self) -> float | None:
        """Seconds until ``recover_at`` (0 when due), on Redis's clock."""
        at = self.recover_at
        return None if at is None else max(0.0, at - self.now)

    @property
    def due(self) -> bool:
        return self.recover_in == 0.0

    @property
    def missing_for(self) -> float | None:
        """Seconds since its last beat."""
        return None if self.last_beat is None else max(0.0, self.now - self.last_beat)

    @property
    def last_beat_at(self) -> dt.datetime | None:
        return as_datetime(self.last_beat)

    @property
    def recover_at_datetime(self) -> dt.datetime | None:
        return as_datetime(self.recover_at)

    @property
    def hostname(self) -> str:
        parts = self.identity.split(":")
        return parts[-3] if len(parts) >= 3 else ""

    @property
    def pid(self) -> int | None:
        parts = self.identity.split(":")
        try:
            return int(parts[-2]) if len(parts) >= 3 else None
        except ValueError:
            return None


class AwaitingRecovery:
    """Jobs taken by processes that died, until a live worker's recovery requeues them."""

    def list(self, jobs_per_process: int = ORPHAN_JOBS_SHOWN) -> list[OrphanedProcess]:
        """Every dead process with jobs in its in-progress list or periodic claims not
        pushed, longest missing first, in three round trips (the first
        ``jobs_per_process`` jobs of each). ``P:inprogress_ids`` of the wrong type raises
        (the admin's error page names it); the claimers set is skipped then."""
        conn = client()
        idents = _listed_identities(conn)
        if not idents:
            return []
        lists = homes.inprogress_keys(conn, idents)
        now, beats, orphans = _dead_with_work(conn, idents, lists)
        if not orphans:
            return []
        count = max(int(jobs_per_process), 1)
        pipe = conn.pipeline(transaction=False)
        for ident, _, _ in orphans:
            for key in lists[ident]:
                pipe.lrange(key, 0, count - 1)
        read = iter(pipe.execute(raise_on_error=False))
        threshold = float(conf.get().ORPHAN_THRESHOLD)
        out = []
        for ident, size, claimed in orphans:
            parts = [next(read) for _ in lists[ident]]
            raws = [r for part in parts if isinstance(part, list) for r in part][:count]
            out.append(
                OrphanedProcess(
                    ident,
                    size,
                    [JobRecord.from_raw(raw, None, "inprogress") for raw in raws],
                    _stamp(beats.get(ident)),
                    now,
                    threshold,
                    claimed,
                )
            )
        return sorted(out, key=lambda o: (o.last_beat is None, o.last_beat or 0.0, o.identity))

    def size(self) -> int:
        """How many jobs wait for recovery, periodic claims included (no job read)."""
        return sum(o.size + o.claims for o in self.list(jobs_per_process=1))


def _listed_identities(conn: Any) -> list[str]:
    """Every process that has an in-progress list or periodic claims (first round trip)."""
    pipe = conn.pipeline(transaction=False)
    pipe.smembers(keys.inprogress_ids())
    pipe.smembers(keys.periodic_claimers())
    with_lists, claimers = pipe.execute(raise_on_error=False)
    if isinstance(with_lists, Exception):
        raise with_lists
    listed = {text(m) for m in with_lists}
    if not isinstance(claimers, Exception):
        listed |= {text(m) for m in claimers}
    return sorted(listed)


def _dead_with_work(
    conn: Any, idents: list[str], lists: dict[str, list[str]]
) -> tuple[float, dict[str, Any], list[tuple[str, int, int]]]:
    """Redis's clock, the last-beat stamps, and ``(identity, jobs listed, claims)`` of
    each process without presence that holds something to recover (second round trip)."""
    pipe = conn.pipeline(transaction=False)
    pipe.time()
    pipe.hgetall(keys.last_beat())
    for ident in idents:
        pipe.exists(keys.process(ident))
        pipe.hlen(keys.periodic_claims(ident))
        for key in lists[ident]:
            pipe.llen(key)
    replies = pipe.execute(raise_on_error=False)
    now = _redis_seconds(replies[0])
    beats = replies[1] if isinstance(replies[1], dict) else {}
    rest = iter(replies[2:])
    orphans = []
    for ident in idents:
        alive, claimed = next(rest), next(rest)
        # A size unreadable (the wrong type) counts 0: checked again next time.
        sizes = [n if isinstance(n, int) else 0 for n in (next(rest) for _ in lists[ident])]
        claimed = claimed if isinstance(claimed, int) else 0
        if alive != 0 or sum(sizes) + claimed == 0:
            continue  # alive, or nothing to recover
        orphans.append((ident, sum(sizes), claimed))
    return now, {text(k): v for k, v in beats.items()}, orphans


def _redis_seconds(reply: Any) -> float:
    try:
        seconds, micros = reply
        return int(seconds) + int(micros) / 1e6
    except (TypeError, ValueError):
        import time

        return time.time()  # TIME refused (some proxies): this host's clock


def _stamp(value: Any) -> float | None:
    return epoch(value)  # finite or None already
