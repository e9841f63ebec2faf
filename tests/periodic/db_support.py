"""Database periodic entries with real workers: rows written on the test databases of
tests/durable_support.py (SQLite and PostgreSQL), workers pointed at the same database
(the test project's router, TESTPROJECT_PERIODIC_DB), runs read back from what
``testapp.jobs.periodic_note`` appends (the entry and the slot from each run's payload)."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from cogworker_django.models import PeriodicEntry

from .. import durable_support
from ..helpers import FAST_SETTINGS

NOTE = "testapp.jobs.periodic_note"

database = durable_support.durable_db
db_alias = durable_support.db_alias


def worker_env(alias: str) -> dict[str, str]:
    return {**durable_support.worker_env(), "TESTPROJECT_PERIODIC_DB": alias}


def start_workers(worker, alias: str, count: int, *, settings: dict | None = None, **kwargs):
    """``count`` workers at once (each waited for once all are launched)."""
    env = {**worker_env(alias), **kwargs.pop("env", {})}
    started = [
        worker(env=env, settings={**FAST_SETTINGS, **(settings or {})}, wait=False, **kwargs)
        for _ in range(count)
    ]
    for w in started:
        w.wait_for_log(r"cogworker \S+ started", timeout=60)
    return started


def add(alias: str, name: str, cron: str, **fields: Any) -> PeriodicEntry:
    row = PeriodicEntry(name=name, cron=cron, job=fields.pop("job", NOTE), **fields)
    row.full_clean(validate_unique=False)  # (the uniqueness check reads "default")
    row.save(using=alias)
    return row


def change(alias: str, entry: str, **fields: Any) -> float:
    """Save ``fields`` on the row (as the admin does); returns when the save returned."""
    row = PeriodicEntry.objects.using(alias).get(name=entry)
    for key, value in fields.items():
        setattr(row, key, value)
    row.full_clean(validate_unique=False)  # (the uniqueness check reads "default")
    row.save(using=alias)
    return time.time()


def delete(alias: str, name: str) -> float:
    PeriodicEntry.objects.using(alias).get(name=name).delete()
    return time.time()


def notes(r, prefix: str, entry: str | None = None) -> list[dict]:
    found = [json.loads(x) for x in r.lrange(f"{prefix}:test:notes", 0, -1)]
    return [n for n in found if entry is None or n["entry"] == entry]


def once_each(runs: list[dict]) -> dict[int, dict]:
    """The runs by slot; fails when a slot ran twice."""
    twice = {s: c for s, c in Counter(n["slot"] for n in runs).items() if c > 1}
    assert twice == {}, f"slots run more than once: {twice}"
    return {n["slot"]: n for n in runs}
