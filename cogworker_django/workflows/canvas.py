"""Chains and groups, made of signatures, each kept as a batch of its own kind.

    chain(fetch.s(url), parse.s(), store.s()).enqueue()
    group(resize.s(1), resize.s(2)).enqueue(then=notify.s())

A chain pushes its first step; each step's success pushes the next one (its return value
first among the next step's arguments) in the same script that records the success, so
a step is pushed once however often the one before it is delivered. The steps still to
come travel in each step's payload (``chain``), as specs. A group pushes its members at
once, in one round trip, and its ``then`` is the batch's on_success.
"""

from __future__ import annotations

from ..core import client
from . import context
from .batch import Batch
from .signatures import Signature, WorkflowError, signature


def _refuse_nesting(what: str) -> None:
    block = context.active()
    if block is not None:
        raise WorkflowError(
            f"a {what} can't be enqueued inside a block of batch {block.batch.bid}: its "
            "jobs belong to the batch the "
            f"{what} makes (enqueue it outside the block, or add its jobs to the batch)"
        )


class ChainBatch(Batch):
    """The batch a chain is kept as."""

    kind = "chain"

    def __init__(self, steps: int, first_jid: str, description: str) -> None:
        super().__init__(description=description)
        self._extra = {"steps": steps, "step": 1, "step_jid": first_jid}

    def note_first_step(self, jid: str) -> None:
        self._extra["step_jid"] = jid


class GroupBatch(Batch):
    """The batch a group is kept as (``then`` is its on_success)."""

    kind = "group"


class Chain:
    """Steps run one after another; each gets the previous one's return value first."""

    def __init__(self, *steps: Signature) -> None:
        if not steps:
            raise ValueError("chain() needs at least one step")
        self.steps = [signature(s, f"step {i + 1} of a chain") for i, s in enumerate(steps)]

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.steps))})"

    def enqueue(self, *, description: str = "") -> ChainBatch:
        """Push the first step; returns the chain's batch (``.bid``, ``.status()``)."""
        _refuse_nesting("chain")
        rest = [s.spec() for s in self.steps[1:]]
        shown = description or " -> ".join(s.func.rsplit(".", 1)[-1] for s in self.steps)
        batch = ChainBatch(len(self.steps), "", shown)
        first = self.steps[0].build(bid=batch.bid, chain=rest, step=1)
        batch.note_first_step(first["jid"])
        with batch:
            client.push(first)
        return batch


class Group:
    """Members run in parallel; ``then`` runs once, after every one has succeeded."""

    def __init__(self, *members: Signature) -> None:
        self.members = [signature(s, f"member {i + 1} of a group") for i, s in enumerate(members)]

    def __repr__(self) -> str:
        return f"group({', '.join(map(repr, self.members))})"

    def enqueue(self, then: Signature | None = None, *, description: str = "") -> GroupBatch:
        """Push every member (one round trip); ``then`` (a signature, or None) runs once
        they have all succeeded; made with ``.with_results()`` it gets their return
        values, as a list in the members' order, as its first argument. Returns the
        group's batch."""
        _refuse_nesting("group")
        shown = description or f"group of {len(self.members)}"
        batch = GroupBatch(
            description=shown, on_success=signature(then, "then") if then is not None else None
        )
        with batch:
            if self.members:
                client.push_many([s.build(bid=batch.bid) for s in self.members])
        return batch


def chain(*steps: Signature) -> Chain:
    """``chain(a.s(...), b.s(...), ...)``: see :class:`Chain`."""
    return Chain(*steps)


def group(*members: Signature) -> Group:
    """``group(a.s(...), b.s(...), ...)``: see :class:`Group`."""
    return Group(*members)


__all__ = ["Chain", "ChainBatch", "Group", "GroupBatch", "chain", "group"]
