"""Batches: jobs that finish together, with callbacks that fire exactly once.

    with Batch(description="import rows", on_success=notify.s(import_id)) as batch:
        for row in rows:
            import_row.enqueue(row)

Every job enqueued inside the block (one by one, in bulk, scheduled, a django.tasks
task) carries the batch's id in its payload (``bid``) and is counted in the batch by the
same script that pushes it (lua/batch_push.lua). While a block is open the callbacks
wait; when the last block has closed and the members are done, the script that records
the last outcome pushes the callbacks (lua/batch_update.lua). docs/workflows.md tells
the whole story.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction

from ..core import client, jobs, payload
from . import local, store
from .context import Block, active, blocks_here, set_blocks
from .signatures import Signature, WorkflowError, signature

log = logging.getLogger("cogworker_django")


# Pushing members (called by client for payloads with a bid) --------------------------------


def push_member(job: dict[str, Any]) -> str | None:
    """Push one member and count it in its batch, in one step."""
    sink = client.active_sink()
    if sink is not None:
        local.register(job)
        return sink(job)
    store.push(job["bid"], [job])
    return job["jid"]


def push_members(prepared: list[dict[str, Any] | None], push_others: Any) -> list[str | None]:
    """client.push_many's path when some of the jobs are batch members: the others go
    through ``push_others`` as before, the members one script per batch (a chunk at a
    time). A refused write is reported for exactly the jobs it carried (BulkPushError)."""
    member_jobs = {i: j for i, j in enumerate(prepared) if j is not None and j.get("bid")}
    out: list[str | None] = [None] * len(prepared)
    refused = _push_others(prepared, member_jobs, push_others, out)
    by_batch: dict[str, list[int]] = {}
    for i, job in member_jobs.items():
        by_batch.setdefault(job["bid"], []).append(i)
    sink = client.active_sink()
    for bid, indices in by_batch.items():
        for start in range(0, len(indices), client.BULK_CHUNK):
            chunk = indices[start : start + client.BULK_CHUNK]
            refused += _push_chunk(bid, [member_jobs[i] for i in chunk], chunk, sink, out)
    if refused:
        if len(refused) == 1 and not any(out):
            raise refused[0]  # nothing went in: the one reason, as a single push says it
        raise client.BulkPushError(out, refused, sum(j is not None for j in prepared))
    return out


def _push_others(
    prepared: list[dict[str, Any] | None],
    members: dict[int, dict[str, Any]],
    push_others: Any,
    out: list[str | None],
) -> list[Exception]:
    """The jobs that are not members, through ``push_others`` (their jids into ``out``);
    returns what Redis refused."""
    others = [None if i in members else j for i, j in enumerate(prepared)]
    if not any(j is not None for j in others):
        return []
    refused: list[Exception] = []
    try:
        done = push_others(others)
    except client.BulkPushError as exc:
        done = exc.results
        refused.extend(exc.errors)
    for i, jid in enumerate(done):
        if i not in members:
            out[i] = jid
    return refused


def _push_chunk(
    bid: str,
    jobs: list[dict[str, Any]],
    positions: list[int],
    sink: Any,
    out: list[str | None],
) -> list[Exception]:
    """One chunk of a batch's members: one script (or the test mode's sink, one by
    one); their jids into ``out`` at ``positions``; returns what Redis refused."""
    if sink is not None:
        # A test mode: an error raises as a push to it would (an inline job's error).
        for i, job in zip(positions, jobs, strict=True):
            local.register(job)
            out[i] = sink(job)
        return []
    try:
        store.push(bid, jobs)
    except Exception as exc:  # noqa: BLE001 - reported for exactly these jobs
        return [exc]
    for i, job in zip(positions, jobs, strict=True):
        out[i] = job["jid"]
    return []


# The Batch --------------------------------------------------------------------------------


class Batch:
    """A set of jobs with callbacks: ``on_complete`` once every member has succeeded or
    failed at least once, ``on_success`` once every member has succeeded. Each fires
    exactly once. Members join inside ``with batch:`` blocks or through :meth:`add`."""

    kind = "batch"

    def __init__(
        self,
        *,
        description: str = "",
        on_success: Signature | None = None,
        on_complete: Signature | None = None,
    ) -> None:
        if not isinstance(description, str):
            raise TypeError(f"description must be a string, got {description!r}")
        self._bid = payload.new_jid()
        self._meta: store.Meta | None = store.Meta(
            self._bid,
            self.kind,
            description,
            signature(on_success, "on_success") if on_success is not None else None,
            signature(on_complete, "on_complete") if on_complete is not None else None,
            any(s is not None and s.wants_results for s in (on_success, on_complete)),
        )
        self._created = False
        self._local: bool | None = None
        self._unclosed: list[tuple[str, bool]] = []
        self._extra: dict[str, Any] = {}

    @classmethod
    def reopen(cls, bid: str) -> Batch:
        """A handle on an existing batch (by id), to add members to it: ``with
        Batch.reopen(bid):`` or ``.add(...)``. Refused (BatchFinished) once it has
        succeeded; BatchNotFound if there is no such batch."""
        if not isinstance(bid, str) or not bid:
            raise TypeError(f"a batch id is a non-empty string, got {bid!r}")
        batch = cls.__new__(cls)
        batch._bid = bid
        batch._meta = None
        batch._created = True
        batch._local = None
        batch._unclosed = []
        batch._extra = {}
        return batch

    @classmethod
    def current(cls) -> Batch | None:
        """Inside a running member of a batch: a handle on its batch (to add siblings:
        it can't finish while this member runs); else None."""
        job = jobs.current_job()
        bid = job.get("bid") if job else None
        return cls.reopen(bid) if isinstance(bid, str) and bid else None

    @property
    def bid(self) -> str:
        return self._bid

    @property
    def description(self) -> str:
        return self._meta.description if self._meta is not None else ""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._bid}>"

    # Blocks -------------------------------------------------------------------------------

    def _open(self) -> Block:
        is_local = client.active_sink() is not None
        if self._local is None:
            self._local = is_local
        elif self._local != is_local:
            raise WorkflowError(
                f"batch {self._bid} was made {'in' if self._local else 'outside'} a test "
                "mode (testing.fake/inline) and can't be used "
                f"{'outside' if self._local else 'in'} one"
            )
        token = payload.new_jid()
        created = None if self._created else self._meta
        if self._local:
            local.open_block(self._bid, token, created, extra=self._extra)
        else:
            store.open_block(self._bid, token, created, extra=self._extra)
        self._created = True
        return Block(self, token, self._local)

    def _close(self, block: Block) -> None:
        if block.local:
            local.close_block(self._bid, block.token)
            return
        try:
            store.patiently(
                lambda: store.update(self._bid, "close", block.token, self._known_meta())
            )
        except Exception:
            self._unclosed.append((block.token, False))
            raise

    def _known_meta(self) -> store.Meta | None:
        if self._meta is None:
            self._meta = store.meta(self._bid)
        return self._meta

    def __enter__(self) -> Batch:
        current = active()
        if current is not None and current.batch.bid != self._bid:
            raise WorkflowError(
                f"a block of batch {self._bid} can't open inside one of batch "
                f"{current.batch.bid}: a job belongs to one batch"
            )
        block = self._open()
        set_blocks((*blocks_here(), block))
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        blocks = blocks_here()
        block = blocks[-1]
        set_blocks(blocks[:-1])
        if block.durable:
            # Closed by an outbox row, in the same transaction as its durable members,
            # once they are all pushed (durable/relay.py). With members on several
            # databases (or on_commit ones besides), by a row on the first: relayed after
            # its commit, when the on_commit members of that commit are pushed.
            from ..durable import writer

            using = sorted(block.durable, key=lambda alias: alias or "")[0]
            writer.close_block(self._bid, block.token, using)
            return
        if block.deferred:
            self._close_at_commit(block)
            return
        try:
            self._close(block)
        except Exception as err:
            if exc_type is None:
                raise
            # The block's own exception is the one to see; this handle keeps the block
            # to close (close()).
            log.error("batch %s: its block could not be closed: %s", self._bid, err)

    def _close_at_commit(self, block: Block) -> None:
        """Jobs of this block are pushed at a commit: close after them, at the same
        commit (on_commit callbacks run in the order they were registered), or after
        every commit when they are several. A rolled back transaction pushes none of
        them and leaves the block open: the batch then waits until it expires
        (BATCH_UNFINISHED_TTL)."""
        remaining = set(block.deferred)

        def committed(using: str | None) -> None:
            remaining.discard(using)
            if not remaining:
                self._close(block)

        for using in block.deferred:
            transaction.on_commit(functools.partial(committed, using), using=using)

    def close(self) -> None:
        """Close the blocks of this handle that could not be closed when they ended
        (Redis away then): until they are, the callbacks wait."""
        pending, self._unclosed = self._unclosed, []
        for token, is_local in pending:
            self._close(Block(self, token, is_local))

    def add(self, *signatures: Signature | Iterable[Signature]) -> list[str | None]:
        """Enqueue these signatures as members (one round trip); returns their jids."""
        sigs: list[Signature] = []
        for item in signatures:
            if isinstance(item, Signature):
                sigs.append(item)
            else:
                sigs.extend(item)
        checked = [signature(s, "a batch member") for s in sigs]
        with self:
            return client.push_many([s.build(bid=self._bid) for s in checked])

    # Reading ------------------------------------------------------------------------------

    def status(self) -> Any:
        """Its progress now: an ``api.BatchRecord`` (None when the batch is gone)."""
        if self._local:
            return local.status(self._bid)
        from ..api.batches import Batches

        return Batches().get(self._bid)


# client pushes batch members through these (it never imports this package).
client.install_member_pushers(push_member, push_members)
