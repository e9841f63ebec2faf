"""The worker's part: every poll, relay what is left in the outboxes and say when a row
has waited too long (the Durable plugin, worker/plugins.py, makes it a poller timer; each
round runs on a thread of its own, started for it: a database that hangs never holds up
the chores thread)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import close_old_connections

from ..api import outbox as outbox_api
from ..store import errors
from . import relay

log = logging.getLogger("cogworker_django")

# A row older than this is worth a warning: a pusher's own relay takes a moment, a
# worker's the next poll; this long means Redis or the relay is in trouble. (The
# dashboard marks such a row late: the same threshold.)
STALE_AGE = outbox_api.STALE_AGE
# At most one warning per database per this many seconds.
WARN_EVERY = 60.0


class Chore:
    """``chore(conn)``, the poller's timer: starts a round of :meth:`run_once` on a thread
    of its own ("durable-relay", which ends when no round is asked for any more; a round
    asked for while one runs follows it), and returns at once. The databases are not the
    poller's to wait for: a database that hangs (a failover behind a firewall that drops
    packets holds a connect for minutes) must not stop the poller's moves of due jobs and
    its orphan recovery, which need only Redis.
    """

    def __init__(self) -> None:
        self.backoff = errors.Backoff()
        self._warned: dict[str, float] = {}
        self._wake = threading.Event()
        self._conn: Any = None
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self._stopping = False

    def __call__(self, conn: Any) -> None:
        self._conn = conn
        with self._thread_lock:
            self._wake.set()
            if self._stopping:
                return
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="durable-relay", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._thread_lock:
                if self._stopping or not self._wake.is_set():
                    self._thread = None  # (the next round starts a new one)
                    return
                self._wake.clear()
            errors.best_effort(relay.COMPONENT, lambda: self.run_once(self._conn))

    def stop(self, timeout: float = 5.0) -> None:
        """End the chore's thread after its round (a worker's exit ends it anyway: it is
        a daemon; a test ends it so no thread of its outlives the test)."""
        with self._thread_lock:
            self._stopping = True
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def run_once(self, conn: Any) -> None:
        """Relay every database's leftovers (:func:`relay.relay_all`), with a backoff of
        its own for deterministic failures (rule 5), then warn about stale rows."""
        try:
            # Only the databases found with rows are aged again: an empty outbox costs
            # a poll one SELECT per database.
            waiting: list[str] = []
            self.backoff.run(relay.COMPONENT, lambda: relay.relay_all(conn, waiting))
            errors.best_effort("Durable outbox age", lambda: self.warn_stale(waiting))
        finally:
            # This thread's database connections: a broken one (a restarted server) or
            # one past CONN_MAX_AGE (0 by default) is closed until the next round.
            close_old_connections()

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
