"""``PeriodicEntries``: the periodic schedule as the operator sees it, and its actions:
each entry with its next and last run, whether it is enabled and who holds its running
lock; disable, enable, and run now.

Entries come from this process's ``COGWORKER_PERIODIC`` (the same settings the workers
run), their state from Redis. A disabled-set or per-entry key that can't be read (wrong
type) shows as enabled / unknown, as the ticker treats it; Redis being away raises.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from ..core import client, locks
from ..periodic import entries as entries_mod
from ..periodic import running_lock
from ..store import connection, errors, keys
from ._util import as_datetime, text


def _when(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return as_datetime(value)


@dataclass(frozen=True)
class PeriodicEntry:
    name: str
    data: dict[str, Any] = field(repr=False)

    def __getattr__(self, item: str) -> Any:
        # Fields of the control module's dict that have no property below.
        try:
            return self.__dict__["data"][item]
        except KeyError:
            raise AttributeError(item) from None

    @property
    def cron(self) -> str:
        return text(self.data.get("cron"))

    @property
    def timezone(self) -> str:
        return text(self.data.get("timezone"))

    @property
    def job(self) -> str:
        return text(self.data.get("job"))

    @property
    def queue(self) -> str:
        return text(self.data.get("queue"))

    @property
    def unique(self) -> str:
        return text(self.data.get("unique"))

    @property
    def enabled(self) -> bool:
        return bool(self.data.get("enabled", True))

    @property
    def lock_holder(self) -> str:
        return text(self.data.get("lock_holder"))

    @property
    def next_run(self) -> dt.datetime | None:
        return _when(self.data.get("next_run"))

    @property
    def last_run(self) -> dt.datetime | None:
        return _when(self.data.get("last_run"))

    @property
    def call_text(self) -> str:
        from .records import _json

        args = self.data.get("args") or []
        kwargs = self.data.get("kwargs") or {}
        parts = [_json(a) for a in (args if isinstance(args, list) else [args])]
        if isinstance(kwargs, dict):
            parts += [f"{k}={_json(v)}" for k, v in kwargs.items()]
        return ", ".join(parts)


class PeriodicEntries:
    def list(self) -> list[PeriodicEntry]:
        return [PeriodicEntry(text(r.get("name")), dict(r)) for r in entries()]

    def get(self, name: str) -> PeriodicEntry | None:
        return next((e for e in self.list() if e.name == name), None)

    def disable(self, name: str) -> Any:
        return disable(name)

    def enable(self, name: str) -> Any:
        return enable(name)

    def run_now(self, name: str) -> str | None:
        """Enqueue the entry's job now; its jid, or None if it was not pushed (a unique
        lock held)."""
        return run_now(name)


# Reading and acting over Redis ------------------------------------------------------


def _readable(value: Any) -> Any:
    """``value`` from a pipeline, None for a deterministic error; an outage raises."""
    if isinstance(value, Exception):
        if errors.is_unavailable(value):
            raise value
        return None
    return value


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(connection.text(value))
    except ValueError:
        return None


def entries() -> list[dict[str, Any]]:
    """Every configured entry as a dict: name, cron, timezone, job, queue, unique, args,
    kwargs, next_run (epoch), last_run (epoch of the last claimed slot, or None),
    enabled, lock_holder (the jid holding the running lock, or None)."""
    loaded = entries_mod.load()
    conn = connection.get_client()
    pipe = conn.pipeline(transaction=False)
    pipe.smembers(keys.periodic_disabled())
    for entry in loaded:
        pipe.get(keys.periodic_last_slot(entry.name))
        pipe.get(keys.periodic_running(entry.name))
    results = pipe.execute(raise_on_error=False)
    disabled = {connection.text(m) for m in (_readable(results[0]) or ())}
    now = time.time()
    rows = []
    for i, entry in enumerate(loaded):
        last, holder = _readable(results[1 + 2 * i]), _readable(results[2 + 2 * i])
        rows.append(
            {
                **entry.as_dict(),
                "next_run": float(entry.schedule.next(now)),
                "last_run": _epoch(last),
                "enabled": entry.name not in disabled,
                "lock_holder": connection.text(holder) if holder is not None else None,
            }
        )
    return rows


def disable(name: str) -> bool:
    """Stop firing ``name`` (its slots are skipped, last_slot untouched, so enabling it
    again fires no burst). True if it was enabled. KeyError for an unknown name."""
    entries_mod.by_name(name)
    return bool(connection.get_client().sadd(keys.periodic_disabled(), name))


def enable(name: str) -> bool:
    """Fire ``name`` again from its next slot. True if it was disabled."""
    entries_mod.by_name(name)
    return bool(connection.get_client().srem(keys.periodic_disabled(), name))


def run_now(name: str) -> str | None:
    """Push one run of ``name`` now, outside the slot mechanism (last_slot untouched;
    works while disabled). For ``until_executed`` the running lock is taken first, as
    the claim does: None when a run holds it (or when a client middleware refused the
    push). Returns the jid."""
    entry = entries_mod.by_name(name)
    job = entry.build_job()
    if not entry.until_executed:
        return client.push(job)
    key, jid = keys.periodic_running(name), job["jid"]
    # Before the push, like the claim: taken after it, a fast run could finish first.
    if not locks.take(key, jid, running_lock.queued_ttl()):
        return None
    try:
        pushed = client.push(job)
    except BaseException:
        locks.release(key, jid, running_lock.COMPONENT)
        raise
    if pushed is None:
        locks.release(key, jid, running_lock.COMPONENT)
    return pushed
