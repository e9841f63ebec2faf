"""The worker's part: every poll, relay what is left in the outboxes and say when a row
has waited too long (extensions.py registers it as a poller timer)."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import close_old_connections

from .. import errors
from . import relay

log = logging.getLogger("cogworker_django")

# A row older than this is worth a warning: a pusher's own relay takes a moment, a
# worker's the next poll; this long means Redis or the relay is in trouble.
STALE_AGE = 60.0
# At most one warning per database per this many seconds.
WARN_EVERY = 60.0


class Chore:
    """``chore(conn)``: relay every database's leftovers (:func:`relay.relay_all`), with
    a backoff of its own for deterministic failures (rule 5), then warn about stale rows.
    """

    def __init__(self) -> None:
        self.backoff = errors.Backoff()
        self._warned: dict[str, float] = {}

    def __call__(self, conn: Any) -> None:
        # This thread's database connections: a broken one (a restarted server) or one
        # past CONN_MAX_AGE is closed here and opened again by the next query.
        close_old_connections()
        # Only the databases found with rows are aged again: an empty outbox costs a
        # poll one SELECT per database.
        waiting: list[str] = []
        self.backoff.run(relay.COMPONENT, lambda: relay.relay_all(conn, waiting))
        errors.best_effort("Durable outbox age", lambda: self.warn_stale(waiting))

    def warn_stale(self, aliases: list[str]) -> None:
        now = time.monotonic()
        for alias in aliases:
            age = relay.oldest_age(alias)
            if age is None or age <= STALE_AGE:
                continue
            if now - self._warned.get(alias, -WARN_EVERY) < WARN_EVERY:
                continue
            self._warned[alias] = now
            count, _ = relay.outbox_size(alias)
            log.warning(
                "durable outbox of database %r: %d rows waiting, the oldest for %.0f s "
                "(Redis unavailable, or the relay can't keep up: see the errors above)",
                alias,
                count,
                age,
            )
