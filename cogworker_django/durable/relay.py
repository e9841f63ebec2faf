"""The relay: committed outbox rows to Redis, each pushed exactly once, then deleted.

(Over 400 lines: a pass's steps share one database transaction and one round trip per
batch; the SQLite turn and the markers' upkeep are parts of the same pass.)

A pass, on one database, in one database transaction:

1. take the pass's lease (Redis's clock, ``TIME``), then read the oldest rows (at most
   :data:`BATCH`), holding them: ``SELECT ... FOR UPDATE SKIP LOCKED`` where the
   database has it (PostgreSQL, MySQL 8, Oracle), so two relays at once take different
   rows and neither waits for the other; SQLite has no row locks, so there one pass at a
   time runs, under an owner-checked Redis lock (:class:`_SqliteTurn`);
2. push each job by lua/outbox_relay.lua: a marker per jid (``keys.relayed``) is set
   NX in the same script as the push, and only if it was not there, and only while the
   pass's lease runs;
3. delete the rows whose script ran, commit; then shorten their markers' TTL to
   :data:`MARKER_KEEP`.

A relay that dies after 2 and before the commit leaves its rows (its transaction rolls
back) and their markers: the next pass finds a marker, pushes nothing and deletes the
row. A marker outlives a dead relay by :data:`MARKER_TTL`, far longer than a row waits
for the next pass of a running worker.

The fence (rule 15). A relay may stall (a GC pause, a frozen VM, SIGSTOP) holding rows
it then loses: PostgreSQL ends its session (``idle_in_transaction_session_timeout``,
``pg_terminate_backend``, a pooler) and its row locks with it, or its SQLite turn
lapses. Another relay then pushes and deletes the same rows. Two things keep the first
from pushing them again when it comes back:

- its pass's lease: the push scripts refuse every push once :data:`PASS_LEASE` seconds
  have passed on Redis's clock since the pass began (before its read);
- within the lease, the markers: each is kept :data:`MARKER_KEEP` seconds (more than the
  lease) after its row's delete is committed, not dropped. A relay that read a row did
  so before that commit, so its lease began before it too, and runs out while the
  marker is still there.

A relay whose lease ran out leaves the rows it did not push for the next pass (logged).

A unique job's lock is taken here, by the same script (not at the enqueue: the row may
roll back). A batch member is pushed and counted by the batch's script, with the same
marker and lease (workflows/store.py). A ``close`` row closes its batch's block once
none of the batch's job rows is left.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import InterfaceError, OperationalError, connections, router, transaction

from ..core import locks, payload, route
from ..core.unique import PUSH_LOCKED, lock_key
from ..core.unique import _push_ttl as push_ttl
from ..store import bell, connection, errors, homes, keys, listing, outbox, runtime, scripts
from ..workflows import store
from ..workflows.signatures import BatchFinished, BatchNotFound
from .entry import CLOSE, TABLE, OutboxEntry

log = logging.getLogger("cogworker_django")

COMPONENT = "Durable outbox relay"
# Rows read and pushed per pass (one database transaction, one Redis round trip).
BATCH = 500
# Passes a poller makes per database per poll at most: a large backlog leaves room for
# the poller's other chores.
MAX_PASSES = 20
# Seconds a marker outlives a relay that died between its push and its commit.
MARKER_TTL = 86400
# Seconds from a pass's start (before its read) during which its pushes are accepted:
# far longer than a pass takes (a query and a round trip, 500 rows), so only a relay
# that stalled finds it run out.
PASS_LEASE = 30.0
# Seconds a marker is kept once its row's delete is committed: longer than PASS_LEASE,
# so that a relay that read the row before that commit finds it while its lease runs;
# the other 30 s cover clocks of cluster nodes that disagree (the lease is read on one
# node, checked on another) and a whole-second TTL. What it costs: one small key per
# durable job pushed in the last minute.
MARKER_KEEP = 60
# The SQLite relay lock's TTL: far longer than a pass (a query and a round trip), short
# enough that a relay killed while holding it holds up the others only a little.
SQLITE_LOCK_TTL = 15.0
# Seconds a database found without the outbox table is skipped before looking again.
TABLE_RECHECK = 60.0

# Called (if set) with the rows a pass pushed, before their deletion: a test stops a
# relay there.
after_push: Callable[[list[OutboxEntry]], None] | None = None
# Called (if set) with the rows a pass holds, before pushing them.
after_read: Callable[[list[OutboxEntry]], None] | None = None


class Databases:
    """What this process knows of each database alias, on its runtime (store/runtime.py):
    whether it has the table (and when that was asked), and which it found unreachable
    (until they answer)."""

    def __init__(self) -> None:
        self.tables: dict[str, tuple[bool, float]] = {}
        self.down: set[str] = set()


def known() -> Databases:
    return runtime.current().of(Databases)


_tables_lock = threading.Lock()


def skip_locked(alias: str) -> bool:
    """True when the database holds rows for a relay (``FOR UPDATE SKIP LOCKED``)."""
    return bool(connections[alias].features.has_select_for_update_skip_locked)


def aliases() -> list[str]:
    """The databases that may hold outbox rows: those the routers allow the model on,
    that have its table (migrated). A SQLite database whose file does not exist is not
    opened (opening it would create it)."""
    found = []
    for alias in connections:
        if router.allow_migrate_model(alias, OutboxEntry) and _has_table(alias):
            found.append(alias)
    return found


def _has_table(alias: str) -> bool:
    now = time.monotonic()
    databases = known()
    with _tables_lock:
        seen = databases.tables.get(alias)
    if seen is not None and (seen[0] or now - seen[1] < TABLE_RECHECK):
        return seen[0]
    settings = connections.settings[alias]
    name = str(settings.get("NAME") or "")
    if settings.get("ENGINE", "").endswith("sqlite3") and (
        not name
        or (":memory:" not in name and "mode=memory" not in name and not os.path.exists(name))
    ):
        present = False
    else:
        try:
            with connections[alias].cursor() as cursor:
                present = TABLE in connections[alias].introspection.table_names(cursor)
        except Exception as exc:  # noqa: BLE001 - not reachable now: asked again next time
            database_down(alias, exc)
            return False
    with _tables_lock:
        databases.tables[alias] = (present, now)
    return present


def relay_own(alias: str, ids: Sequence[int]) -> int:
    """The enqueuing process's relay of the rows it just committed (``ids``), right
    after its commit. Never raises: what it can't push (Redis away), a worker's poller
    pushes later. Returns how many it pushed."""
    if not ids:
        return 0
    pushed = 0
    try:
        conn = connection.get_client()
        for start in range(0, len(ids), BATCH):
            pushed += _pass(alias, conn, ids=ids[start : start + BATCH])[0]
    except Exception as exc:  # noqa: BLE001 - the rows are committed: a worker relays them
        # This process tries once, at its commit: the workers' relay retries (said so, not
        # "retrying", in a shell or a web process that never will).
        errors.report(
            COMPONENT,
            exc,
            "left in the outbox",
            then="a worker pushes it when Redis is back (this process does not retry)",
        )
        return 0
    errors.recovered(COMPONENT)
    return pushed


def relay_pending(conn: Any, alias: str, passes: int = MAX_PASSES) -> int:
    """A worker's relay of what is left on ``alias``, oldest first, until none is left
    or after ``passes`` passes; returns how many were pushed. Raises when Redis or the
    database is unavailable (the poller's backoff)."""
    pushed = 0
    for _ in range(passes):
        done, read, removed = _pass(alias, conn)
        pushed += done
        # A full pass that removed no row (each refused, or another relay's turn) would
        # read the same rows again: they wait for the next poll.
        if read < BATCH or not removed:
            break
    return pushed


def relay_all(conn: Any, waiting: list[str] | None = None) -> int:
    """:func:`relay_pending` on every database holding outbox rows (the poller's chore).
    One database that fails does not stop the others; the first failure is raised after
    them. ``waiting`` (when given) gets the databases found with rows."""
    pushed = 0
    failure: Exception | None = None
    for alias in aliases():
        try:
            age = oldest_age(alias)
        except (OperationalError, InterfaceError) as exc:
            # The database is away (a restart, a failover): said once, asked again at the
            # next poll, not backed off (a backoff would hold the rows up to minutes
            # after it is back).
            database_down(alias, exc)
            continue
        except Exception as exc:  # noqa: BLE001 - raised after the others
            failure = failure or exc
            continue
        database_up(alias)
        if age is None:
            continue  # empty: one SELECT; no transaction, no lock, no Redis
        if waiting is not None:
            waiting.append(alias)
        try:
            pushed += relay_pending(conn, alias)
        except (OperationalError, InterfaceError) as exc:
            # Lost mid-pass: its transaction rolled back, the rows wait; what it pushed
            # has its marker, so the next pass pushes none of it again.
            database_down(alias, exc)
        except Exception as exc:  # noqa: BLE001 - raised after the others
            failure = failure or exc
    if failure is not None:
        raise failure
    return pushed


def database_down(alias: str, exc: BaseException) -> None:
    """Log once that ``alias`` can't be reached (until :func:`database_up`). Whether it
    has the table is asked again (SQLite says "no such table" as it says "database is
    locked": a table dropped since is found so, and skipped)."""
    databases = known()
    with _tables_lock:
        first = alias not in databases.down
        databases.down.add(alias)
        databases.tables.pop(alias, None)
    if first:
        log.warning(
            "%s: database %r unavailable (%s); its rows wait, asked again at each poll",
            COMPONENT,
            alias,
            errors.describe(exc),
        )


def database_up(alias: str) -> None:
    databases = known()
    with _tables_lock:
        was_down = alias in databases.down
        databases.down.discard(alias)
    if was_down:
        log.warning("%s: database %r recovered", COMPONENT, alias)


def _pass(alias: str, conn: Any, ids: Sequence[int] | None = None) -> tuple[int, int, int]:
    """One pass (see the module docstring); returns (pushed, rows read, rows deleted)."""
    if skip_locked(alias):
        pushed, read, markers, removed = _locked_pass(alias, conn, ids)
        _keep(conn, markers)
        return pushed, read, removed
    turn = _SqliteTurn(alias, conn)
    if not turn.take():
        return 0, 0, 0  # another relay is at it: these rows are its, or the next pass's
    try:
        # Had the turn lapsed (a pass that stalled), another relay may have read and
        # pushed these rows: the lease and the markers fence this one (module docstring).
        pushed, read, markers, removed = _locked_pass(alias, conn, ids)
        _keep(conn, markers)
        return pushed, read, removed
    finally:
        turn.give_back()


class _SqliteTurn:
    """One relay at a time on a database without row locks: an owner-checked Redis lock
    per database, taken without waiting (a relay that finds it held leaves the rows to
    the holder or to a later pass). A relay killed while holding it holds it up to
    :data:`SQLITE_LOCK_TTL`."""

    def __init__(self, alias: str, conn: Any) -> None:
        self.key = keys.durable_relay_lock(alias)
        self.conn = conn
        self.owner = payload.new_jid()
        self.taken = False

    def take(self) -> bool:
        self.taken = locks.take(self.key, self.owner, SQLITE_LOCK_TTL, self.conn)
        return self.taken

    def give_back(self) -> None:
        if self.taken:
            errors.best_effort(COMPONENT, lambda: locks.delete(self.key, self.owner, self.conn))


def _locked_pass(
    alias: str, conn: Any, ids: Sequence[int] | None
) -> tuple[int, int, list[str], int]:
    """Read, push and delete in one database transaction; returns (pushed, rows read,
    the markers to keep for MARKER_KEEP now that the deletes are committed, rows
    deleted)."""
    # Before the read: a row this pass reads was not deleted by another relay's commit
    # yet, so the lease runs out before that row's marker would (module docstring).
    lease = outbox.take_lease(conn, PASS_LEASE)
    with transaction.atomic(using=alias):
        rows = _read(alias, ids)
        if not rows:
            return 0, 0, [], 0
        if after_read is not None:
            after_read(rows)
        jobs = [row for row in rows if row.kind != CLOSE]
        done, pushed, markers = _push(conn, jobs, lease)
        if after_push is not None:
            after_push(jobs)
        closing = [row for row in rows if row.kind == CLOSE]
        if closing:
            done += _close_blocks(alias, closing, done)
        if done:
            OutboxEntry.objects.using(alias).filter(id__in=done).delete()
    if pushed:
        log.debug("durable outbox: %d jobs pushed from %r", pushed, alias)
    return pushed, len(rows), markers, len(done)


def _read(alias: str, ids: Sequence[int] | None) -> list[OutboxEntry]:
    rows = OutboxEntry.objects.using(alias).order_by("id")
    if ids is not None:
        rows = rows.filter(id__in=list(ids))
    if skip_locked(alias):
        rows = rows.select_for_update(skip_locked=True)
    return list(rows[:BATCH])


def _keep(conn: Any, markers: list[str]) -> None:
    """Keep the markers of committed deletes for MARKER_KEEP seconds more, no longer a
    day (best effort: left as they are, they expire later; never dropped, which would
    let a relay that stalled with the same rows push them again)."""
    if not markers:
        return

    def keep() -> None:
        pipe = conn.pipeline(transaction=False)
        for marker in markers:
            pipe.expire(marker, MARKER_KEEP)
        pipe.execute()

    errors.best_effort(COMPONENT, keep)


def _push(
    conn: Any, rows: list[OutboxEntry], lease: outbox.Lease | None = None
) -> tuple[list[int], int, list[str]]:
    """Each row's script in one pipeline; returns the ids of the rows to delete (their
    script ran), how many were pushed, and their markers. Raises when Redis is
    unavailable; a row refused deterministically (a key of the wrong type: the key guard
    moves it aside) stays for a later pass, and is reported; so does every row refused
    because ``lease`` ran out (the pass stalled), logged."""
    if not rows:
        return [], 0, []
    relay = _Pass(conn, lease)
    pipe = conn.pipeline(transaction=False)
    for row in rows:
        relay.add(pipe, row)
    relay.read(relay.send(pipe))
    for bid, found in relay.members.items():
        relay.push_batch(bid, found)
    if relay.failure is not None:
        errors.report(COMPONENT, relay.failure, "a row was left in the outbox")
    if relay.expired:
        log.warning(
            "durable outbox: %d rows not pushed: this pass's lease of %g s ran out (the "
            "process stalled?); another relay may have pushed them: left for the next pass",
            relay.expired,
            PASS_LEASE,
        )
    return relay.done, relay.pushed, relay.markers


class _Pass:
    """One pass's rows: each row's script queued on one pipeline (a batch's members go
    together, through their batch's own script), the replies read back into what to
    delete, how many were pushed and their markers."""

    def __init__(self, conn: Any, lease: outbox.Lease | None = None) -> None:
        self.conn = conn
        self.lease = lease
        self.now = time.time()
        self.script = scripts.get("outbox_relay")
        self.members: dict[str, list[tuple[OutboxEntry, dict[str, Any]]]] = {}
        self.planned: list[tuple[OutboxEntry, str]] = []  # (row, its marker: "" when buried)
        self.listing: set[str] = set()
        self.done: list[int] = []
        self.markers: list[str] = []
        self.pushed = 0
        self.expired = 0  # rows refused: the lease ran out
        self.failure: Exception | None = None  # the first deterministic refusal

    def add(self, pipe: Any, row: OutboxEntry) -> None:
        job = payload.decode(row.payload)
        why = _unpushable(job)
        plan: tuple[list[str], list[Any]] | None = None
        if why is None and not job.get("bid"):
            try:
                plan = _plan(row, job, self.now, self.lease)
            except Exception as exc:  # noqa: BLE001 - this row's fields, not the others'
                why = f"its fields can't be pushed: {errors.describe(exc)}"
        if why is not None:
            # Only a row written by hand (an enqueue writes none of these): filed in dead
            # with its bytes (rule 6), never left to fail every pass, holding up none.
            _bury(self.conn, row, job, why)
            self.planned.append((row, ""))
            return
        if plan is None:
            self.members.setdefault(job["bid"], []).append((row, job))
            return
        key_list, args = plan
        self.script.pipelined(pipe, key_list, args)
        self.planned.append((row, key_list[0]))
        self.listing.add(job["queue"])

    def send(self, pipe: Any) -> list[Any]:
        if self.listing:
            # The queues' listing rides in the same round trip, after the pushes; only a
            # listing (rule 1): its failure is reported, never raised.
            listing.add(pipe, *sorted(self.listing))
        replies = scripts.execute(pipe, self.conn, raise_on_error=False) if len(pipe) else []
        if self.listing:
            listing.report(replies[-1], *sorted(self.listing))
        return replies

    def read(self, replies: list[Any]) -> None:
        replies_iter = iter(replies)
        for row, marker in self.planned:
            if not marker:
                self.done.append(row.id)
                continue
            reply = next(replies_iter)
            if isinstance(reply, Exception):
                if errors.is_unavailable(reply):
                    raise reply
                self.failure = self.failure or reply
                continue
            if int(reply) == 3:
                self.expired += 1  # the row stays: not pushed, no marker set
                continue
            self.done.append(row.id)
            self.markers.append(marker)
            if int(reply) == 1:
                self.pushed += 1
        if self.pushed and self.listing:  # idle workers start them now (store/bell.py)
            bell.ring(self.conn, sorted(self.listing))

    def push_batch(self, bid: str, found: list[tuple[OutboxEntry, dict[str, Any]]]) -> None:
        try:
            count, member_markers = store.push_durable(
                bid, [job for _row, job in found], self.conn, self.lease
            )
        except outbox.LeaseExpired:
            self.expired += len(found)
            return
        except (BatchNotFound, BatchFinished) as exc:
            # Its batch expired (BATCH_UNFINISHED_TTL) or finished: it can't join any more.
            for row, job in found:
                _bury(self.conn, row, job, errors.safe_str(exc))
                self.done.append(row.id)
            return
        except Exception as exc:
            if errors.is_unavailable(exc):
                raise
            self.failure = self.failure or exc
            return
        self.pushed += count
        self.done += [row.id for row, _job in found]
        self.markers += member_markers


def _unpushable(job: dict[str, Any]) -> str | None:
    """Why the payload of a row can't be pushed (None when it can): what the script and
    the batch's script would otherwise fail on at every pass."""
    queue = job.get("queue")
    if job["func"] == payload.UNPARSEABLE or not isinstance(queue, str) or not queue:
        return "not a job with a queue"
    at = job.get("at")
    if at is not None and (
        isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at)
    ):
        return f"its 'at' is not a time: {errors.safe_str(at, 100)}"
    bid = job.get("bid")
    if bid is not None and not isinstance(bid, str):
        return f"its 'bid' is not a batch id: {errors.safe_str(bid, 100)}"
    return None


def _plan(
    row: OutboxEntry, job: dict[str, Any], now: float, lease: outbox.Lease | None = None
) -> tuple[list[str], list[Any]]:
    """The keys and arguments of lua/outbox_relay.lua for ``row`` (not a batch member);
    the first key is its marker."""
    home = homes.job_home(job)
    key_list = [keys.relayed(row.jid, home)]
    # Scheduled, or plain: the text as written at the enqueue; else stamped now.
    where = route.placement(job, now, row.payload)
    key_list.append(where.key)
    value, score = where.value, where.score_arg
    args: list[Any] = [value, score, MARKER_TTL, *outbox.lease_args(lease)]
    lock = lock_key(job) if job.get("unique") in PUSH_LOCKED else None
    if lock is not None:
        key_list.append(lock)
        args += [row.jid, push_ttl(job, now)]
    return key_list, args


def _bury(conn: Any, row: OutboxEntry, job: dict[str, Any], why: str) -> None:
    """File a row that can't be pushed in the prefix's dead set, with its bytes (the
    row is deleted after: rule 2)."""
    queue = job.get("queue") if isinstance(job.get("queue"), str) else None
    wrapper = payload.unparseable(row.payload, queue, "InvalidOutboxEntry", why)
    conn.zadd(keys.dead(keys.root()), {payload.encode(wrapper): time.time()})
    log.error(
        "durable outbox: row %s (jid %s) can't be pushed (%s): filed in dead", row.id, row.jid, why
    )


def _close_blocks(alias: str, rows: list[OutboxEntry], pushed: list[int]) -> list[int]:
    """Close the batch blocks of ``rows`` whose batch has no job row left but those this
    pass pushed (a row another relay holds counts: its members are not yet pushed, or
    that relay may still roll back); returns the ids of the rows closed."""
    closed: list[int] = []
    for row in rows:
        waiting = OutboxEntry.objects.using(alias).filter(bid=row.bid).exclude(kind=CLOSE)
        if waiting.exclude(id__in=pushed).exists():
            continue
        try:
            store.close_durable(row.bid, row.jid)
        except Exception as exc:
            if errors.is_unavailable(exc):
                raise
            # This block's row only (a close is idempotent per block, so it is tried
            # again next pass): raised, it would roll back the deletes of the jobs this
            # pass pushed, and hold up every row of the database behind it.
            errors.report(COMPONENT, exc, f"the block of batch {row.bid} left in the outbox")
            continue
        closed.append(row.id)
    return closed


def oldest_age(alias: str) -> float | None:
    """Seconds the oldest row of the outbox of ``alias`` has waited, None when empty."""
    oldest = (
        OutboxEntry.objects.using(alias).order_by("id").values_list("created_at", flat=True)[:1]
    )
    found = list(oldest)
    return max(0.0, time.time() - found[0]) if found else None


def outbox_size(alias: str) -> tuple[int, float | None]:
    """(rows in the outbox of ``alias``, the oldest one's age in seconds or None)."""
    return OutboxEntry.objects.using(alias).count(), oldest_age(alias)
