"""``ProcessSet`` (live worker processes) and ``Workers`` (what their threads run now).

A process is live while its presence hash ``P:process:<id>`` exists (the heartbeat
renews its TTL every beat). Members of ``P:processes`` without one are processes that
died without cleaning up: they are skipped, and removed from the set (best-effort; a
process that beats again adds itself back).

Quiet and stop are published on ``P:signal:<id>``; the process's subscriber reacts
within about a second, and its next beat shows the new state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .. import errors, keys
from ._util import as_datetime, client, epoch, text
from .records import JobRecord


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
    def started_at(self):
        return as_datetime(self._info("started_at"))

    @property
    def beat_at(self):
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

    @property
    def started_at(self):
        return as_datetime(self.run_at)


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
