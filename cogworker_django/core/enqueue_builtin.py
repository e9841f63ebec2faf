"""The built-in enqueue plugins (core/enqueue_plugins.py), in the order an enqueue asks
them: the job controls' options, unique jobs, the batch a job joins, the durable outbox.
The package's ``__init__`` installs :func:`builtin` once; nothing registers itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import conf
from ..controls import options
from ..workflows import context, signatures
from . import unique
from .enqueue_plugins import EnqueuePlugin


class Options(EnqueuePlugin):
    """The job controls' options (timeout, expires_in, limits): checked, and written in
    the payload."""

    name = "Options"

    # The functions themselves (no frame of the plugin's own on every enqueue).
    check_options = staticmethod(options.check_options)
    payload_fields = staticmethod(options.payload_fields)


class Unique(EnqueuePlugin):
    """A unique job's mode, lock TTL and digest (of its function, arguments and queue)."""

    name = "Unique"

    def job_fields(
        self,
        path: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        opts: dict[str, Any],
        fields: dict[str, Any],
    ) -> None:
        mode = opts.get("unique")
        if not mode:
            return
        fields["unique"] = mode
        # Whole seconds, rounded up: int(0.5) would be 0, read as "no TTL given".
        fields["unique_for"] = math.ceil(opts.get("unique_for") or conf.get().UNIQUE_LOCK_TTL)
        fields["unique_digest"] = unique.digest(path, args, kwargs, opts["queue"])


class Workflows(EnqueuePlugin):
    """A job enqueued inside a ``Batch`` block joins its batch; ``job.s(...)`` is a
    workflow signature."""

    name = "Workflows"

    join = staticmethod(context.stamp)

    def plain_bulk(self) -> bool:
        return context.active() is None  # (members are counted in their batch)

    def signature(
        self,
        path: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        opts: dict[str, Any],
        enqueuer: Any,
    ) -> Any:
        return signatures.Signature(path, args, kwargs, opts, enqueuer=enqueuer)


class Durable(EnqueuePlugin):
    """``durable=True``: an outbox row in the caller's transaction (durable/)."""

    name = "Durable"

    def durable_enqueue(
        self, job: dict[str, Any], encoded: str | None, using_db: str | None
    ) -> str | None:
        return _writer().enqueue(job, encoded, using_db)

    def durable_enqueue_many(
        self, jobs: list[dict[str, Any]], texts: Sequence[str | None], using_db: str | None
    ) -> list[str | None]:
        return _writer().enqueue_many(jobs, texts, using_db)


def _writer() -> Any:
    # The writer holds the outbox's model, which Django lets no one import before the
    # apps are loaded (and this module is imported with the package): asked at the first
    # durable enqueue, long after.
    from ..durable import writer

    return writer


def builtin() -> tuple[EnqueuePlugin, ...]:
    """The enqueue side's plugins, in the order each part is asked."""
    return (Options(), Unique(), Workflows(), Durable())
