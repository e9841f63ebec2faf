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

import time
from typing import Any

from ..core import client, payload
from ..core.jobref import JobRef
from ..core.results import JobFailed
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

    def enqueue(self, *, description: str = "") -> ChainRef:
        """Push the first step; returns the reference of the last one (its jid is chosen
        now), whose ``result()`` is the chain's final value; ``.batch`` is the chain's
        batch (``.bid``, ``.batch.status()``)."""
        _refuse_nesting("chain")
        steps = [*self.steps[:-1], self.steps[-1].with_jid(payload.new_jid())]
        rest = [s.spec() for s in steps[1:]]
        shown = description or " -> ".join(s.func.rsplit(".", 1)[-1] for s in steps)
        batch = ChainBatch(len(steps), "", shown)
        first = steps[0].build(bid=batch.bid, chain=rest, step=1)
        batch.note_first_step(first["jid"])
        with batch:
            client.push(first)
        last = steps[-1].jid if len(steps) > 1 else first["jid"]
        return ChainRef(str(last), batch)


class ChainRef(JobRef):
    """A chain's reference: the :class:`~cogworker_django.JobRef` of its last step, so
    ``result()`` is the chain's final value; a step that ends in dead stops the chain,
    and ``result()`` then raises :class:`~cogworker_django.JobFailed` for that step.
    ``batch`` (and ``bid``) is the chain's batch."""

    batch: ChainBatch

    def __new__(cls, jid: str, batch: ChainBatch) -> ChainRef:
        ref = super().__new__(cls, jid)
        ref.batch = batch
        return ref

    @property
    def bid(self) -> str:
        return self.batch.bid

    def status(self) -> str | None:
        status = super().status()
        if status is None and self._stopped() is not None:
            return "dead"
        return status

    def result(self, timeout: float | None = None) -> Any:
        """The last step's return value; waits in slices, each followed by a look at the
        chain's batch (a stopped chain's last step never runs)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return super().result(STOP_LOOK if left is None else min(STOP_LOOK, left))
            except TimeoutError:
                failure = self._stopped()
                if failure is not None:
                    raise JobFailed(
                        failure.jid,
                        "dead",
                        failure.error_class,
                        f"the chain stopped at this step: {failure.error_message}",
                    ) from None
                if left is not None and left <= STOP_LOOK:
                    raise

    def _stopped(self) -> Any:
        """The failure that stopped the chain (a step in dead), or None."""
        record = self.batch.status()
        failures = getattr(record, "failures", None) or ()
        return next((f for f in failures if f.dead), None)


# How often a chain's result() looks whether a step stopped the chain.
STOP_LOOK = 1.0


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
