"""``Quarantine``: keys of the wrong type the key guard moved aside, over
``cogworker_django.keyguard`` (loaded lazily, see optional.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from . import optional
from ._util import as_datetime, epoch, text

MODULE = "cogworker_django.keyguard"


@dataclass(frozen=True)
class QuarantinedKey:
    data: dict[str, Any] = field(repr=False)

    key = property(lambda self: text(self.data.get("key")))
    original_key = property(lambda self: text(self.data.get("original_key")))
    type = property(lambda self: text(self.data.get("type")))

    @property
    def size(self) -> int | None:
        value = self.data.get("size")
        return value if isinstance(value, int) else None

    @property
    def ttl(self) -> int | None:
        value = self.data.get("ttl")
        return value if isinstance(value, int) else None

    @property
    def moved_at(self) -> dt.datetime | None:
        ms = epoch(self.data.get("moved_at"))  # epoch milliseconds
        return as_datetime(ms / 1000.0) if ms is not None else None


class Quarantine:
    @staticmethod
    def available() -> bool:
        return optional.available(MODULE, "quarantined", "preview", "delete")

    def list(self, start: int = 0, count: int = 50) -> list[QuarantinedKey]:
        rows = optional.function(MODULE, "quarantined")(start=start, count=count)
        return [QuarantinedKey(dict(r)) for r in rows]

    def preview(self, key: str) -> str:
        return text(optional.function(MODULE, "preview")(key))

    def delete(self, key: str) -> Any:
        return optional.function(MODULE, "delete")(key)
