"""Writing durable jobs: rows of the outbox in the caller's transaction, relayed after it.

The job was built and checked by jobs.py (arguments, size, options) and goes through
the client middleware here, before its row is written: whatever an enqueue refuses is
refused before anything is in the database. Its row is written on the database
``using_db`` names (when not given: where the routers send ``OutboxEntry``, ``default``
without routers), in the transaction open there (autocommit outside one). Then, at the
commit (at once in autocommit), this process relays the rows it wrote
(:func:`relay.relay_own`, best effort: a failure there never reaches the caller, the
rows wait for a worker).

In a test mode (``testing.fake()``, ``inline()``, ``TESTING``) a durable job goes to
the mode's sink at the commit, as an ``on_commit`` one does: no row, no Redis.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError, router, transaction

from ..core import client, middleware, payload
from . import relay
from .entry import CLOSE, JOB, TABLE, OutboxEntry


def database(using_db: str | None) -> str:
    """The database the rows of an enqueue with ``using_db`` go to."""
    return using_db or router.db_for_write(OutboxEntry)


def enqueue(job: dict[str, Any], encoded: str | None, using_db: str | None) -> str | None:
    """Write ``job`` (built a moment ago; ``encoded``: its payload text, None when
    something changed it since) as an outbox row; returns its jid, or None when a
    client middleware stopped it."""
    alias = database(using_db)
    if client.active_sink() is not None:
        transaction.on_commit(functools.partial(client.push, job), using=alias)
        jid: str = job["jid"]
        return jid
    if middleware.has_client_middleware():
        kept: list[dict[str, Any]] = []
        middleware.run_client_chain(job, functools.partial(_keep, kept))
        if not kept:
            return None
        job, encoded = kept[0], None
    _write(alias, [job], [encoded])
    return job["jid"]


def enqueue_many(
    jobs: list[dict[str, Any]], texts: Sequence[str | None], using_db: str | None
) -> list[str | None]:
    """:func:`enqueue` for many jobs: one INSERT (bulk_create) for the call."""
    alias = database(using_db)
    if client.active_sink() is not None:
        transaction.on_commit(functools.partial(client.push_many, jobs), using=alias)
        return [j["jid"] for j in jobs]
    kept_texts: list[str | None] = list(texts)
    out: list[str | None] = [j["jid"] for j in jobs]
    if middleware.has_client_middleware():
        kept_jobs = []
        kept_texts = []
        for i, job in enumerate(jobs):
            kept: list[dict[str, Any]] = []
            middleware.run_client_chain(job, functools.partial(_keep, kept))
            if kept:
                kept_jobs.append(kept[0])
                kept_texts.append(None)
            else:
                out[i] = None
        jobs = kept_jobs
    _write(alias, jobs, kept_texts)
    return out


def close_block(bid: str, token: str, using_db: str | None) -> None:
    """A ``close`` row for the block ``token`` of batch ``bid`` whose members are
    durable (workflows/batch.py): the relay closes it once they are all pushed."""
    row = OutboxEntry(kind=CLOSE, jid=token, payload="", created_at=time.time(), bid=bid)
    alias = database(using_db)
    row.save(using=alias, force_insert=True)
    _relay_at_commit(alias, [row.pk])


def _keep(kept: list[dict[str, Any]], job: dict[str, Any]) -> str:
    # The end of the client chain: the job as the middleware left it, to be written.
    kept.append(job)
    jid: str = job["jid"]
    return jid


def _write(alias: str, jobs: list[dict[str, Any]], texts: Sequence[str | None]) -> None:
    if not jobs:
        return
    now = time.time()
    rows = [
        OutboxEntry(
            kind=JOB,
            jid=job["jid"],
            queue=job["queue"],
            payload=text if text is not None else payload.encode(job),
            run_at=job.get("at"),
            created_at=now,
            bid=job.get("bid") or "",
        )
        for job, text in zip(jobs, texts, strict=True)
    ]
    try:
        if len(rows) == 1:
            rows[0].save(using=alias, force_insert=True)
        else:
            OutboxEntry.objects.using(alias).bulk_create(rows)
    except DatabaseError as exc:
        _no_table_hint(alias, exc)
        raise
    ids = [row.pk for row in rows]
    # A database that does not return the new ids (MySQL): the workers relay them.
    _relay_at_commit(alias, [i for i in ids if i is not None])


_NO_TABLE = ("no such table", "does not exist", "doesn't exist")


def _no_table_hint(alias: str, exc: DatabaseError) -> None:
    """The outbox table missing (``migrate`` not run yet, or not on this database): raise
    the same error class saying so, instead of the driver's bare "no such table"."""
    table = TABLE
    text = str(exc)
    # SQLite, PostgreSQL, MySQL: how each says a table is missing (read from the message:
    # a query to look would fail in the transaction the error has just broken).
    if table not in text or not any(m in text for m in _NO_TABLE):
        return
    raise type(exc)(
        f"{exc} -- the durable outbox table {table} does not exist in database {alias!r}: run "
        f"`manage.py migrate cogworker_django --database {alias}` (a durable enqueue writes a "
        "row of it in your transaction)"
    ) from exc


def _relay_at_commit(alias: str, ids: list[int]) -> None:
    """Relay ``ids`` right after the commit of the transaction open on ``alias`` (at once
    in autocommit). The rows of one transaction go in one relay: the first of its
    callbacks takes every id waiting on this connection (Django's connections are per
    thread), the others find none.

    The waiting ids start afresh when no callback of ours is pending on the connection:
    those left belong to a transaction (or the savepoint that held our only callback)
    that rolled back. Their rows are gone, but on SQLite their ids are handed out again
    (to a row of another transaction, which its own enqueuer relays); relaying them
    here would take another transaction's rows. Ids of a rolled-back savepoint whose
    transaction has callbacks of ours before it stay: on SQLite they can only have been
    reused by a row of this same transaction."""
    if not ids:
        return
    conn = transaction.get_connection(alias)
    waiting: list[int] | None = getattr(conn, "_cogworker_durable_ids", None)
    if waiting is None or not _pending(conn):
        waiting = []
        conn._cogworker_durable_ids = waiting
    waiting.extend(ids)
    transaction.on_commit(functools.partial(_relay_waiting, alias, waiting), using=alias)


def _pending(conn: Any) -> bool:
    """True when a relay of ours waits for the commit on ``conn`` (Django's list of
    commit callbacks: ``(savepoint ids, function, robust)``, without those of a
    savepoint rolled back)."""
    return any(getattr(entry[1], "func", None) is _relay_waiting for entry in conn.run_on_commit)


def _relay_waiting(alias: str, waiting: list[int]) -> None:
    taken = waiting[:]
    del waiting[:]
    if taken:
        relay.relay_own(alias, taken)
