"""Client and server middleware chains.

A client middleware wraps every push::

    class AddTenant(ClientMiddleware):
        def __call__(self, job, push):
            job["kwargs"].setdefault("tenant", current_tenant())
            return push(job)        # return None without calling push() to stop the push

A server middleware wraps every run inside the worker::

    class Timing(ServerMiddleware):
        def __call__(self, job, queue, run):
            started = time.monotonic()
            try:
                return run()
            finally:
                log.info("%s took %.3fs", job["func"], time.monotonic() - started)

Both are configured as dotted paths in ``COGWORKER["MIDDLEWARE"]``; a class is
instantiated once with no arguments, any other callable is used as it is.

The worker's built-in server middleware say when they have work to do, so that a run
that needs none of them does not pass through them (worker/processor.RunChain, which
chooses a run's links once, from its payload): ``payload_fields``, the payload fields
whose (truthy) presence is the only thing that makes it act; ``active``, False when this
process's settings leave it nothing to do for any run; ``active_now()``, asked before each
run when that can change while the worker runs (the log level). The user's middleware is
in every run's chain, whatever attributes it has.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

from .. import conf
from ..store.errors import CogworkerError


class ClientMiddleware:
    def __call__(self, job: dict[str, Any], push: Callable[[dict[str, Any]], Any]) -> Any:
        return push(job)


class ServerMiddleware:
    def __call__(self, job: dict[str, Any], queue: str, run: Callable[[], Any]) -> Any:
        return run()


@functools.lru_cache(maxsize=16)
def _load(paths: tuple[str, ...]) -> tuple[Callable[..., Any], ...]:
    loaded = []
    for path in paths:
        obj = import_string(path)
        loaded.append(obj() if isinstance(obj, type) else obj)
    return tuple(loaded)


# Put first in the client chain by COGWORKER["OTEL"] (tracing.py).
TRACE_CONTEXT_MIDDLEWARE = "cogworker_django.observe.tracing.TraceContextMiddleware"


def client_middleware() -> tuple[Callable[..., Any], ...]:
    settings = conf.get()
    paths = tuple(settings.MIDDLEWARE["client"])
    if settings.OTEL:
        paths = (TRACE_CONTEXT_MIDDLEWARE, *paths)
    return _load(paths)


def has_client_middleware() -> bool:
    """Whether :func:`client_middleware` is a chain of any link (without loading it)."""
    settings = conf.get()
    return bool(settings.OTEL or settings.MIDDLEWARE["client"])


def server_middleware() -> tuple[Callable[..., Any], ...]:
    return _load(tuple(conf.get().MIDDLEWARE["server"]))


def run_client_chain(job: dict[str, Any], push: Callable[[dict[str, Any]], Any]) -> Any:
    chain = client_middleware()
    if not chain:
        return push(job)

    def call(i: int, current: dict[str, Any]) -> Any:
        if i == len(chain):
            return push(current)
        return chain[i](current, lambda j: call(i + 1, j))

    return call(0, job)


def run_server_chain(
    chain: tuple[Callable[..., Any], ...] | list[Callable[..., Any]],
    job: dict[str, Any],
    queue: str,
    perform: Callable[[], Any],
) -> Any:
    n = len(chain)
    if n == 0:
        return perform()
    if n == 1:
        return chain[0](job, queue, perform)

    def call(i: int) -> Any:
        if i == n - 1:
            return chain[i](job, queue, perform)
        return chain[i](job, queue, lambda: call(i + 1))

    return call(0)


class Reschedule(CogworkerError):  # noqa: N818 - a control-flow signal, not an error
    """Raised by a server middleware to put the job back on the schedule ``delay``
    seconds from now without running it and without counting a failure. ``on_filed``,
    if given, is called with the payload the job is filed as in the schedule, twice:
    ``on_filed(payload, False)`` just before the filing and ``on_filed(payload, True)``
    once it is filed (not when the filing is left for later)."""

    def __init__(
        self,
        delay: float,
        reason: str = "",
        on_filed: Callable[[str, bool], Any] | None = None,
    ) -> None:
        super().__init__(reason or f"rescheduled in {delay}s")
        self.delay = delay
        # The limiters index their waiting jobs by the filed payload. Told before the
        # filing too: a process killed between its filing and the index write would
        # leave a job nothing points at (it would wait for its fallback score); the
        # other way round the index points at a job not filed yet, whose run the
        # orphan recovery brings back, and the waker drops the pointer.
        self.on_filed = on_filed
