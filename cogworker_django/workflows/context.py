"""Which batch a job being enqueued here joins: the open ``with batch:`` blocks of this
context (a thread, or an asyncio task), innermost last."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from .signatures import WorkflowError


@dataclass
class Block:
    """One open ``with batch:`` block."""

    batch: Any  # the Batch
    token: str
    local: bool  # a test mode's batch (workflows/local.py), not Redis's
    # Databases whose commit pushes jobs of this block (on_commit enqueues): the block
    # closes after those pushes, at the same commit.
    deferred: set[str | None] = field(default_factory=set)
    # Databases holding durable members of this block (outbox rows): the block is closed
    # by a row of its own there, relayed once they are all pushed (durable/relay.py).
    durable: set[str | None] = field(default_factory=set)


_blocks: contextvars.ContextVar[tuple[Block, ...]] = contextvars.ContextVar(
    "cogworker_batch_blocks", default=()
)


def blocks_here() -> tuple[Block, ...]:
    return _blocks.get()


def set_blocks(blocks: tuple[Block, ...]) -> None:
    _blocks.set(blocks)


def active() -> Block | None:
    """The innermost open block of this context, or None."""
    blocks = _blocks.get()
    return blocks[-1] if blocks else None


def detach() -> contextvars.Token:
    """Leave every block for a while (a job run inline must not join its caller's
    batch); hand the token to :func:`reattach`."""
    return _blocks.set(())


def reattach(token: contextvars.Token) -> None:
    _blocks.reset(token)


def stamp(
    job: dict[str, Any], deferred: bool = False, using: str | None = None, durable: bool = False
) -> bool:
    """Make ``job`` (being built) a member of the batch whose block is open here, if one
    is; ``deferred``: it is pushed at the commit of database ``using``; ``durable``: as
    an outbox row there. True when it was made one (the job changed)."""
    block = active()
    if block is None or job.get("bid"):
        return False
    if job.get("unique") in ("until_executed", "until_started"):
        raise WorkflowError(
            f"{job.get('func')}: a unique job (unique={job['unique']!r}) can't join a "
            "batch: a refused duplicate would be counted as a member that never runs"
        )
    job["bid"] = block.batch.bid
    if durable and not block.local:  # (a test mode's: pushed at the commit, no row)
        block.durable.add(using)
    elif deferred:
        block.deferred.add(using)
    return True
