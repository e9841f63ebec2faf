"""Workflows: batches with callbacks that fire exactly once, chains and groups.

    from cogworker_django import Batch, chain, group

    with Batch(description="import rows", on_success=notify.s(import_id)) as batch:
        for row in rows:
            import_row.enqueue(row)

    chain(fetch.s(url), parse.s(), store.s()).enqueue()
    group(resize.s(1), resize.s(2)).enqueue(then=notify.s())

Modules: signatures (``job.s(...)``), context (which batch a job being enqueued joins),
batch (``Batch``, members' pushes), canvas (``chain``, ``group``), store (the Redis
scripts), middleware (the worker's bookkeeping), local (the test modes), status (what
``api.Batches`` reads). docs/workflows.md has the semantics and the guarantees.
"""

from .batch import Batch
from .canvas import Chain, Group, chain, group
from .signatures import BatchFinished, BatchNotFound, Signature, WorkflowError

__all__ = [
    "Batch",
    "BatchFinished",
    "BatchNotFound",
    "Chain",
    "Group",
    "Signature",
    "WorkflowError",
    "chain",
    "group",
]
