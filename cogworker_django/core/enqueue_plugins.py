"""Enqueue-side plugins: how a feature takes part in an enqueue, as worker plugins
(worker/plugins.py) take part in a worker process.

The enqueue methods (core/jobs.py) know the job core only; the job options of the
controls, unique jobs, the batch a job joins and the durable outbox are plugins of a
list handed in once (``install_enqueue_plugins``, by the package's ``__init__``; the
built-ins are core/enqueue_builtin.py), so the job core imports none of them. A plugin may give any of
these, each asked of every plugin that gives it, in the list's order:

- ``check_options(where, opts)``: at ``@job(...)`` and ``using(...)``; raises for a bad
  option (ValueError, TypeError, ImproperlyConfigured);
- ``payload_fields(opts, now, at)``: the payload fields of the options (a dict, merged),
  worked out once per enqueue call (once for a whole ``enqueue_many``);
- ``job_fields(path, args, kwargs, opts, fields)``: per job, before it is built: adds
  to ``fields`` what depends on the arguments;
- ``join(job, deferred, using, durable)``: per job, once built and encoded (``deferred``:
  pushed at the commit of database ``using``; ``durable``: as an outbox row there): True
  when the plugin changed the job (it joined a batch), so its encoded text is stale;
- ``plain_bulk()``: False when a bulk enqueue must take the general path now.

Two are answers rather than contributions, given by one plugin of the list at most:

- ``durable_enqueue(job, encoded, using_db)`` / ``durable_enqueue_many(jobs, texts,
  using_db)``: a durable enqueue (an outbox row in the caller's transaction);
- ``signature(path, args, kwargs, opts, enqueuer)``: what ``job.s(...)`` makes.

The base class gives no-ops, and :class:`Table` keeps, per part, only the plugins that
override it: built once when installed, an enqueue calls nothing for a part no plugin
gives (docs/internals.md, "Enqueue plugins": a fraction of a microsecond per enqueue).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..store import runtime
from ..store.errors import CogworkerError

_CONTRIBUTED = ("check_options", "payload_fields", "job_fields", "join", "plain_bulk")
_ANSWERED = ("durable_enqueue", "signature")


class EnqueuePlugin:
    name = "enqueue plugin"

    def check_options(self, where: str, opts: dict[str, Any]) -> None:
        return None

    def payload_fields(self, opts: dict[str, Any], now: float, at: float | None) -> dict[str, Any]:
        return {}

    def job_fields(
        self,
        path: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        opts: dict[str, Any],
        fields: dict[str, Any],
    ) -> None:
        return None

    def join(self, job: dict[str, Any], deferred: bool, using: str | None, durable: bool) -> bool:
        return False

    def plain_bulk(self) -> bool:
        return True

    def durable_enqueue(
        self, job: dict[str, Any], encoded: str | None, using_db: str | None
    ) -> str | None:
        raise NotImplementedError

    def durable_enqueue_many(
        self, jobs: list[dict[str, Any]], texts: Sequence[str | None], using_db: str | None
    ) -> list[str | None]:
        raise NotImplementedError

    def signature(
        self,
        path: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        opts: dict[str, Any],
        enqueuer: Any,
    ) -> Any:
        raise NotImplementedError


def _gives(plugin: EnqueuePlugin, part: str) -> bool:
    return getattr(type(plugin), part) is not getattr(EnqueuePlugin, part)


class Table:
    """The installed plugins, each part's givers bound once (what an enqueue asks)."""

    def __init__(self, plugins: Sequence[EnqueuePlugin]) -> None:
        self.plugins = tuple(plugins)
        of: dict[str, tuple[Any, ...]] = {
            part: tuple(getattr(p, part) for p in self.plugins if _gives(p, part))
            for part in _CONTRIBUTED
        }
        self.checks: tuple[Callable[[str, dict[str, Any]], None], ...] = of["check_options"]
        self.fields: tuple[Callable[..., dict[str, Any]], ...] = of["payload_fields"]
        self.job_fields: tuple[Callable[..., None], ...] = of["job_fields"]
        self.joins: tuple[Callable[..., bool], ...] = of["join"]
        self.plain_checks: tuple[Callable[[], bool], ...] = of["plain_bulk"]
        answered: dict[str, EnqueuePlugin | None] = {}
        for part in _ANSWERED:
            givers = [p for p in self.plugins if _gives(p, part)]
            if len(givers) > 1:
                raise CogworkerError(
                    f"enqueue plugins: {part} is given by {[p.name for p in givers]}; one at most"
                )
            answered[part] = givers[0] if givers else None
        self.durable = answered["durable_enqueue"]
        self.signer = answered["signature"]

    def payload_fields(self, opts: dict[str, Any], now: float, at: float | None) -> dict[str, Any]:
        """Every giver's fields, merged (a new dict the caller may change)."""
        if len(self.fields) == 1:
            return self.fields[0](opts, now, at)  # (the built-ins: one giver, a new dict)
        fields: dict[str, Any] = {}
        for give in self.fields:
            fields.update(give(opts, now, at))
        return fields

    def durable_writer(self) -> EnqueuePlugin:
        if self.durable is None:
            raise CogworkerError("a durable enqueue needs an enqueue plugin that gives one")
        return self.durable


class _Installed:
    """The process's enqueue plugins (a registration: installed at import, for the
    process's life; a test's fresh runtime keeps them)."""

    def __init__(self) -> None:
        self.table: Table | None = None


def install_enqueue_plugins(plugins: Sequence[EnqueuePlugin]) -> Table:
    """Make ``plugins`` the enqueue side's list (the package's ``__init__`` installs the
    built-ins, before anything can enqueue or declare a job)."""
    table = Table(plugins)
    runtime.registered(_Installed).table = table
    return table


def current() -> Table:
    table = runtime.registered(_Installed).table
    if table is None:  # (only if the package's __init__ did not run to its end)
        raise CogworkerError("no enqueue plugins installed: import cogworker_django first")
    return table
