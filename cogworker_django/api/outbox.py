"""The durable enqueue's outboxes (durable/): how many rows wait in each database, and
how long the oldest has waited. Read from the databases, not Redis: rows wait there
exactly when Redis could not take them."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("cogworker_django")

# A row older than this is late (the workers warn in their log): the dashboard marks it.
STALE_AGE = 60.0


@dataclass(frozen=True)
class OutboxInfo:
    database: str
    size: int
    oldest_age: float | None  # seconds; None when empty
    error: str = ""  # the database could not be read

    @property
    def stale(self) -> bool:
        return self.oldest_age is not None and self.oldest_age > STALE_AGE


class Outbox:
    """``Outbox().databases()``: an :class:`OutboxInfo` per database that holds the outbox
    table (those the routers allow ``OutboxEntry`` on, migrated)."""

    def databases(self) -> list[OutboxInfo]:
        from ..durable import relay

        found = []
        for alias in relay.aliases():
            try:
                size, age = relay.outbox_size(alias)
            except Exception as exc:  # noqa: BLE001 - one database down hides no other
                from ..store.errors import describe

                found.append(OutboxInfo(alias, 0, None, describe(exc)))
                continue
            found.append(OutboxInfo(alias, size, age))
        return found
