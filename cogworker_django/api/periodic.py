"""``PeriodicEntries``: the periodic schedule as the operator sees it, and its actions,
over ``cogworker_django.periodic.control`` (loaded lazily, see optional.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from . import optional
from ._util import as_datetime, text

MODULE = "cogworker_django.periodic.control"


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
    @staticmethod
    def available() -> bool:
        return optional.available(MODULE, "entries", "disable", "enable", "run_now")

    def list(self) -> list[PeriodicEntry]:
        rows = optional.function(MODULE, "entries")()
        return [PeriodicEntry(text(r.get("name")), dict(r)) for r in rows]

    def get(self, name: str) -> PeriodicEntry | None:
        return next((e for e in self.list() if e.name == name), None)

    def disable(self, name: str) -> Any:
        return optional.function(MODULE, "disable")(name)

    def enable(self, name: str) -> Any:
        return optional.function(MODULE, "enable")(name)

    def run_now(self, name: str) -> str | None:
        """Enqueue the entry's job now; its jid, or None if it was not pushed (a unique
        lock held)."""
        return optional.function(MODULE, "run_now")(name)
