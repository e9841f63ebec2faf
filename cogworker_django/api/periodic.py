"""``PeriodicEntries``: the periodic schedule as the operator sees it, and its actions:
each entry with its next and last run, whether it is enabled and who holds its running
lock; disable, enable, and run now.

Entries come from this process's ``COGWORKER_PERIODIC`` (the same settings the workers
run) and from the ``PeriodicEntry`` table (``source``: "settings" or "database"), their
state from Redis. A settings entry is disabled in Redis (``P:periodic:disabled``); a
database entry by its ``enabled`` field (saved: the workers see it at their next tick).
A database row that would not run (its job gone, say) is listed with ``problem``. A
disabled-set or per-entry key that can't be read (wrong type) shows as enabled /
unknown, as the ticker treats it; Redis being away raises.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..core import client, locks
from ..periodic import entries as entries_mod
from ..periodic import running_lock
from ..store import connection, errors, keys, runtime
from ._util import as_datetime, text

log = logging.getLogger("cogworker_django")


class _Unreadable:
    """Whether the table could not be read last time (said once), on the runtime."""

    now = False


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
    def source(self) -> str:
        return text(self.data.get("source")) or entries_mod.SETTINGS

    @property
    def from_settings(self) -> bool:
        return self.source == entries_mod.SETTINGS

    @property
    def pk(self) -> Any:
        """The database row's primary key (None for a settings entry)."""
        return self.data.get("pk")

    @property
    def description(self) -> str:
        return text(self.data.get("description"))

    @property
    def problem(self) -> str:
        """Why a database entry is not run ("" when it is)."""
        return text(self.data.get("problem"))

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
    """Every entry as a dict, the settings' first, then the database's by name: name,
    source, cron, timezone, job, queue, unique, args, kwargs, next_run (epoch, None when
    disabled or not run), last_run (epoch of the last claimed slot, or None), enabled,
    lock_holder (the jid holding the running lock, or None); a database entry also has
    pk, description and problem (why it is not run, or "")."""
    loaded = entries_mod.load()
    rows = _database_rows({e.name for e in loaded})
    names = [e.name for e in loaded] + [row["name"] for row in rows]
    conn = connection.get_client()
    pipe = conn.pipeline(transaction=False)
    pipe.smembers(keys.periodic_disabled())
    for name in names:
        pipe.get(keys.periodic_last_slot(name))
        pipe.get(keys.periodic_running(name))
    results = pipe.execute(raise_on_error=False)
    disabled = {connection.text(m) for m in (_readable(results[0]) or ())}
    now = time.time()
    found = [{**e.as_dict(), "entry": e, "enabled": e.name not in disabled} for e in loaded]
    found += [{**row, "enabled": row["enabled"] and row["name"] not in disabled} for row in rows]
    out = []
    for i, row in enumerate(found):
        last, holder = _readable(results[1 + 2 * i]), _readable(results[2 + 2 * i])
        entry = row.pop("entry", None)
        out.append(
            {
                **row,
                "next_run": float(entry.schedule.next(now))
                if entry is not None and row["enabled"]
                else None,
                "last_run": _epoch(last),
                "lock_holder": connection.text(holder) if holder is not None else None,
            }
        )
    return out


def _database_rows(reserved: set[str]) -> list[dict[str, Any]]:
    """The database's entries as listed (a row of a settings entry's name shows its
    problem: the settings entry wins)."""
    from ..periodic.stored import PeriodicEntry

    said = runtime.current().of(_Unreadable)
    try:
        found = list(PeriodicEntry.objects.all())
    except Exception as exc:  # noqa: BLE001 - the settings' entries are still listed
        # (a database down, or not migrated: the dashboard and the metrics read this too)
        if not said.now:
            log.warning(
                "Periodic entries: the database's can't be listed (%s)", errors.describe(exc)
            )
        said.now = True
        return []
    said.now = False
    rows = []
    for row in found:
        entry, problem = None, ""
        if row.name in reserved:
            problem = "COGWORKER_PERIODIC has an entry of this name: the settings entry runs"
        else:
            try:
                entry = row.entry()
            except ImproperlyConfigured as exc:
                problem = str(exc).replace("COGWORKER_PERIODIC", "PeriodicEntry")
        raw = row.raw()
        rows.append(
            {
                "name": row.name,
                "source": entries_mod.DATABASE,
                "cron": row.cron,
                "job": row.job,
                "args": raw["args"],
                "kwargs": raw["kwargs"],
                "queue": entry.queue if entry is not None else row.queue,
                "unique": row.unique or None,
                "timezone": entry.timezone if entry is not None else row.timezone,
                "enabled": row.enabled and entry is not None,
                "pk": row.pk,
                "description": row.description,
                "problem": problem,
                "entry": entry,
            }
        )
    return rows


def _resolve(name: str) -> tuple[entries_mod.Entry | None, Any]:
    """(the settings entry, None) or (its entry or None when invalid, the database row);
    KeyError for a name of neither."""
    try:
        return entries_mod.by_name(name), None
    except KeyError:
        pass
    from ..periodic.stored import PeriodicEntry

    row = PeriodicEntry.objects.filter(name=name).first()
    if row is None:
        raise KeyError(f"no periodic entry named {name!r} (COGWORKER_PERIODIC or the database)")
    try:
        return row.entry(), row
    except ImproperlyConfigured:
        return None, row


def disable(name: str) -> bool:
    """Stop firing ``name`` (its slots are skipped, last_slot untouched, so enabling it
    again fires no burst). True if it was enabled. KeyError for an unknown name. A
    database entry is saved with ``enabled`` off (the workers see it within a tick)."""
    _, row = _resolve(name)
    if row is not None:
        return _set_enabled(row, False)
    return bool(connection.get_client().sadd(keys.periodic_disabled(), name))


def enable(name: str) -> bool:
    """Fire ``name`` again from its next slot. True if it was disabled."""
    _, row = _resolve(name)
    if row is not None:
        # (a name left in the Redis set by a settings entry of the same name once)
        connection.get_client().srem(keys.periodic_disabled(), name)
        return _set_enabled(row, True)
    return bool(connection.get_client().srem(keys.periodic_disabled(), name))


def _set_enabled(row: Any, enabled: bool) -> bool:
    if row.enabled == enabled:
        return False
    row.enabled = enabled
    row.save(update_fields=["enabled", "changed_at", "owed_slot"])
    return True


def run_now(name: str) -> str | None:
    """Push one run of ``name`` now, outside the slot mechanism (last_slot untouched;
    works while disabled). For ``until_executed`` the running lock is taken first, as
    the claim does: None when a run holds it (or when a client middleware refused the
    push). Returns the jid."""
    entry, _ = _resolve(name)
    if entry is None:
        raise ValueError(f"periodic entry {name!r} of the database is invalid: fix it first")
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
