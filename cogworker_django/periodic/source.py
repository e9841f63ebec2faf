"""The database's periodic entries as one worker process knows them: read on a thread of
its own, handed to the ticker as a snapshot.

Duties:
- read the enabled rows of ``PeriodicEntry`` (on the database the routers give for
  reading it) when the ticker asks: when ``P:periodic:version`` moved (a save or a
  delete bumped it), and at least every ``REREAD`` seconds (a bump lost while Redis was
  away, a row changed by ``QuerySet.update()``);
- validate each row as a settings entry is validated (entries.py); a bad row (its job
  gone in a deploy, say) is logged once per version of the row and skipped, never
  stopping the others (rule 6); a row that takes a settings entry's name is skipped too
  (the settings entry wins);
- keep the last schedule read while the database can't be read: said once, and once
  when it answers again; a missing table (``migrate`` not run) counts as no entries.

The reads run on their own thread because a database may hang (a server stopped with
SIGSTOP, packets dropped by a failover: a connect waits for minutes): the ticker waits
for a read at most ``LOAD_WAIT`` seconds, and not at all while a read is under way or
after one failed; meanwhile it fires the schedule it has.

Cost: one SELECT per change and per ``REREAD`` per process; the ticker's own cost is one
GET of the version key per tick (ticker.py).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections, router

from ..store import errors
from .entries import Entry

log = logging.getLogger("cogworker_django")

# The safety net: the table is read at least this often even when the version key says
# nothing changed.
REREAD = 60.0
# How long a tick waits for a read it asked for before it fires the schedule it has.
LOAD_WAIT = 2.0
# A read that has not returned after this long counts as an outage (said once).
HUNG = 10.0


@dataclass(frozen=True)
class Snapshot:
    """The database's enabled, valid entries, read after the version key said
    ``version`` (None: never read)."""

    entries: tuple[Entry, ...]
    version: str | None
    read_at: float  # monotonic


class DatabaseEntries:
    """``request(version)`` starts a read unless one is under way; ``wait`` waits for
    one; ``snapshot`` is the last good read. ``reserved``: the settings' entry names;
    ``alias``: a database alias (tests), else the routers'."""

    def __init__(self, reserved: Iterable[str] = (), alias: str | None = None) -> None:
        self.reserved = set(reserved)
        self.alias = alias  # None: the database the routers give for reading the model
        self.snapshot = Snapshot((), None, -math.inf)
        self.failing = False  # the last read failed: the snapshot is what was read before
        self._lock = threading.Condition()
        self._wanted: str | None = None  # the version a read was asked for, not begun
        self._reading_since: float | None = None  # monotonic start of the read under way
        self._reads = 0  # reads finished (good or not)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._said: dict[str, object] = {}  # row name -> the version of it logged as bad
        self._no_table_said = False
        self._say = threading.Lock()  # the outage is said once (by either thread)

    # The ticker's side -------------------------------------------------------------------

    def due(self, version: str | None, now: float | None = None) -> bool:
        """Whether the snapshot is older than ``version`` or than REREAD."""
        now = time.monotonic() if now is None else now
        snap = self.snapshot
        if now - snap.read_at >= REREAD:
            return True
        # (an unreadable version key: the re-read above only)
        return version is not None and snap.version != version

    def request(self, version: str) -> int | None:
        """Ask for a read tagged ``version``; returns the count of reads to wait past, or
        None when it is not worth waiting: a read is under way already (the database may
        hang) or the last one failed (the outage goes on: the last schedule fires)."""
        with self._lock:
            self._wanted = version
            if self._reading_since is not None or self.failing:
                target = None
            else:
                target = self._reads + 1
            hung = self._reading_since is not None and (
                time.monotonic() - self._reading_since > HUNG
            )
            self._lock.notify_all()
        if hung:
            self._down(TimeoutError(f"a read has not returned for over {HUNG:g}s"))
        self._ensure_thread()
        return target

    def wait(self, target: int, timeout: float = LOAD_WAIT) -> bool:
        """Wait until ``target`` reads have finished; False after ``timeout``."""
        with self._lock:
            return self._lock.wait_for(lambda: self._reads >= target, timeout)

    def finished(self, target: int) -> bool:
        """Whether ``target`` reads have finished (:meth:`wait` without the wait)."""
        with self._lock:
            return self._reads >= target

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()

    # The reading thread ------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        # On demand: reads are rare (a change, or REREAD), so the thread ends once no
        # read is wanted, and the next request starts another.
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="periodic-db", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stopping or self._wanted is None:
                    self._thread = None
                    return
                version, self._wanted = self._wanted, None
                self._reading_since = time.monotonic()
            try:
                self.read(version)
            finally:
                # This thread's connections: reads are rare, so none is kept open between
                # them (and a broken one, after a database restart, is not reused).
                errors.best_effort(COMPONENT, _close_connections, "closing its connection")
                with self._lock:
                    self._reading_since = None
                    self._reads += 1
                    self._lock.notify_all()

    def read(self, version: str | None) -> bool:
        """Read the table now (on the calling thread); the snapshot is replaced only by
        a good read. Returns whether it was one. Never raises."""
        try:
            found = self._rows()
        except Exception as exc:  # noqa: BLE001 - the last schedule read stays
            self._down(exc)
            return False
        if self.failing:
            self.failing = False
            log.warning("%s: the database answers again; its entries are read again", COMPONENT)
        self.snapshot = Snapshot(tuple(self._valid(found)), version, time.monotonic())
        return True

    def _rows(self) -> list:
        from .stored import TABLE, PeriodicEntry

        alias = self.alias or router.db_for_read(PeriodicEntry)
        table = has_table(alias)
        if not table:
            if table is False and not self._no_table_said:
                self._no_table_said = True
                log.warning(
                    "%s: database %r has no table %s (run manage.py migrate): only "
                    "COGWORKER_PERIODIC's entries run",
                    COMPONENT,
                    alias,
                    TABLE,
                )
            return []
        self._no_table_said = False
        return list(PeriodicEntry.objects.using(alias).filter(enabled=True))

    def _valid(self, rows: list) -> list[Entry]:
        found = []
        for row in rows:
            stamp = (row.changed_at, row.owed_slot, row.cron, row.job, row.queue)
            if row.name in self.reserved:
                if self._said.get(row.name) != stamp:
                    self._said[row.name] = stamp
                    log.warning(
                        "periodic entry %r of the database is not run: COGWORKER_PERIODIC has "
                        "an entry of that name (settings win; rename one of them)",
                        row.name,
                    )
                continue
            try:
                found.append(row.entry())
            except ImproperlyConfigured as exc:
                if self._said.get(row.name) != stamp:
                    self._said[row.name] = stamp
                    log.error(
                        "periodic entry %r of the database is not run (fix it in the admin): %s",
                        row.name,
                        str(exc).replace("COGWORKER_PERIODIC", "PeriodicEntry"),
                    )
                continue
            self._said.pop(row.name, None)
        return found

    def _down(self, exc: BaseException) -> None:
        with self._say:
            first, self.failing = not self.failing, True
        if first:
            log.warning(
                "%s: the database can't be read (%s); firing the last schedule read until it "
                "answers",
                COMPONENT,
                errors.describe(exc),
            )


COMPONENT = "Periodic entries"


def _close_connections() -> None:
    close_old_connections()
    for conn in connections.all(initialized_only=True):
        conn.close()


def has_table(alias: str) -> bool | None:
    """Whether ``alias`` has the table. A SQLite file that does not exist is not opened
    (opening it would create it): None, no table and nothing to say (a project that
    never used that database)."""
    from .stored import TABLE

    settings = connections.settings[alias]
    name = str(settings.get("NAME") or "")
    if settings.get("ENGINE", "").endswith("sqlite3") and (
        not name
        or (":memory:" not in name and "mode=memory" not in name and not os.path.exists(name))
    ):
        return None
    with connections[alias].cursor() as cursor:
        return TABLE in connections[alias].introspection.table_names(cursor)


class Schedule:
    """The entries one ticker runs: the settings' (resolved at boot, rule 10), then the
    database's last snapshot. :meth:`refresh`, once per tick, reads the version key and
    has the table read again when it moved."""

    def __init__(self, configured: Iterable[Entry], database: DatabaseEntries | None) -> None:
        self.configured = list(configured)
        self.database = database
        self._version_unreadable = False
        # A read asked for and not waited for (the chores' tick): (its target, until when
        # the ticks wait for it, monotonic).
        self._awaiting: tuple[int, float] | None = None
        # The database's snapshot this tick runs: taken once per refresh, so a read that
        # returns in the middle of a tick (one that hung) changes nothing until the next.
        self._in_use = database.snapshot if database is not None else None

    @property
    def entries(self) -> list[Entry]:
        snap = self._in_use
        return self.configured + (list(snap.entries) if snap is not None else [])

    def counts(self) -> tuple[int, int]:
        db = self.database
        return len(self.configured), (len(db.snapshot.entries) if db is not None else 0)

    def refresh(self, conn: object, block: bool = True) -> str | None:
        """One GET; a read of the table when due (waited for up to LOAD_WAIT). Returns the
        fence for the database entries' claims: the version their snapshot was read at,
        or "" (no fence) when the snapshot is not of the current version (the database
        can't be read: the last schedule read keeps firing) or the key can't be read.
        ``block`` False (the worker's chores thread, which a database must not hold up):
        None while the read asked for is under way and LOAD_WAIT has not passed; ask
        again soon. Raises when Redis is away."""
        db = self.database
        if db is None:
            return ""
        version = self._version(conn)
        if self._awaiting is None and db.due(version):
            target = db.request(version if version is not None else "")
            if target is not None:
                if block:
                    db.wait(target)
                else:
                    self._awaiting = (target, time.monotonic() + LOAD_WAIT)
        if self._awaiting is not None:
            target, until = self._awaiting
            if not db.finished(target) and time.monotonic() < until:
                return None
            self._awaiting = None
        snap = self._in_use = db.snapshot
        if version is None or snap.version != version:
            return ""
        return version

    def _version(self, conn: object) -> str | None:
        from ..store import connection, keys

        try:
            raw = conn.get(keys.periodic_version())  # type: ignore[attr-defined]
        except Exception as exc:
            if errors.is_unavailable(exc):
                raise
            # (a key of the wrong type, until the key guard moves it aside)
            if not self._version_unreadable:
                self._version_unreadable = True
                log.error(
                    "%s: %s can't be read (%s): changes are seen at the next re-read of the "
                    "table, unfenced",
                    COMPONENT,
                    keys.periodic_version(),
                    errors.describe(exc),
                )
            return None
        self._version_unreadable = False
        return "0" if raw is None else connection.text(raw)
