"""The process's runtime: every piece of state this process keeps between calls, in one
object (docs/internals.md, "The runtime").

- the Redis client (one per process, so one connection pool; dropped in a forked child,
  whose parent's sockets must never be shared);
- the scripts loaded (:mod:`.scripts`), and who is told of each script run (the
  worker's fetch round-trip counter, when metrics are on);
- the queue listing's throttle (:mod:`.listing`: when this process last listed a queue);
- the outage reporter (:mod:`.errors`: which components are down, what was logged once);
- the writes Redis refused while it was away, kept in memory and retried: the stats
  counts (flushed every beat), lock releases and django.tasks result writes (retried
  every beat), each a :class:`Deferred`;
- the limiter leases this process holds (controls/limits.py), and what a worker process
  sets at its start: its identity (written in its leases) and its limiter waker's hook
  (told of a lease released, a job parked).

:func:`current` is the one in use. ``AppConfig.ready()`` builds it (:func:`install`); a
process that never loads the app builds one on first use. A test gets a fresh one
(:func:`install` again) instead of clearing private state module by module.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from . import errors

log = logging.getLogger("cogworker_django")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Deferred(Generic[K, V]):
    """Writes that could not be made while Redis was away, one per key, kept in this
    process's memory and retried (by the heartbeat, before a periodic tick, at shutdown).
    One still pending when the process exits is lost: each caller says what that costs
    (a lock left to its TTL, a result not written, counts not added).

    ``merge``: how a value added under a key already pending combines with it (counts
    add up); without it the newer value replaces the older (one release per lock)."""

    def __init__(self, what: str, merge: Callable[[V, V], V] | None = None) -> None:
        self.what = what
        self._merge = merge
        self._lock = threading.Lock()
        self._pending: dict[K, V] = {}

    def add(self, key: K, value: V) -> None:
        with self._lock:
            merge, pending = self._merge, self._pending
            if merge is not None and key in pending:
                value = merge(pending[key], value)
            pending[key] = value

    def pending(self) -> dict[K, V]:
        with self._lock:
            return dict(self._pending)

    def take_all(self) -> dict[K, V]:
        """Everything pending, forgotten here (a caller that writes them in one go puts
        back with :meth:`put_back` what did not go through)."""
        with self._lock:
            taken, self._pending = self._pending, {}
            return taken

    def put_back(self, items: dict[K, V]) -> None:
        for key, value in items.items():
            self.add(key, value)

    def forget(self, key: K, value: V) -> None:
        """Drop ``key`` if it still holds ``value`` (a newer one added meanwhile stays)."""
        with self._lock:
            if key in self._pending and self._pending[key] == value:
                del self._pending[key]

    def retry_all(self, write: Callable[[K, V], Any]) -> int:
        """``write`` each pending entry, in the order they were added; stops at (and
        raises) the first outage, no point hammering Redis. A deterministic failure is
        logged and dropped: retrying it can't help. Returns how many were done."""
        done = 0
        for key, value in self.pending().items():
            try:
                write(key, value)
            except Exception as exc:
                if errors.is_unavailable(exc):
                    raise
                log.error("deferred %s %s dropped: %s", self.what, key, errors.describe(exc))
            self.forget(key, value)
            done += 1
        return done

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()


class HeldLeases:
    """This process's limiter leases (controls/limits.py), member -> lease, for the
    heartbeat's refresh and the watchdog."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: dict[str, Any] = {}

    def add(self, lease: Any) -> None:
        with self._lock:
            self._leases[lease.member] = lease

    def discard(self, lease: Any) -> None:
        with self._lock:
            self._leases.pop(lease.member, None)

    def all(self) -> list[Any]:
        with self._lock:
            return list(self._leases.values())

    def renamed(self, lease: Any, old: str) -> None:
        with self._lock:
            if self._leases.pop(old, None) is not None:
                self._leases[lease.member] = lease

    def of_run(self, run_key: int) -> list[Any]:
        with self._lock:
            return [lease for lease in self._leases.values() if lease.run_key == run_key]


def _add(a: int, b: int) -> int:
    return a + b


class Runtime:
    """One process's state (see the module's doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client: Any = None
        self._client_pid: int | None = None
        self.scripts: dict[str, Any] = {}  # name -> scripts.Script
        # Told the script's name before each run by EVALSHA (None: nobody).
        self.script_observer: Callable[[str], None] | None = None
        self.listed: dict[tuple[str, str], float] = {}  # (prefix, queue) -> when listed
        self.listing_lock = threading.Lock()
        self.reporter = errors.Reporter()
        self.counts: Deferred[tuple[str, str], int] = Deferred("counts", merge=_add)
        self.releases: Deferred[str, str] = Deferred("release of")
        self.results: Deferred[tuple[str, str], list[Any]] = Deferred("result of task")
        self.leases = HeldLeases()
        # A worker's start sets these (the Controls plugin, worker/plugins.py).
        self.identity = f"{socket.gethostname().split('.')[0]}:{os.getpid()}"
        self.limit_wake: Callable[[tuple[str, ...], bool], Any] | None = None

    # The Redis client ----------------------------------------------------------------------

    def client(self, build: Callable[[], Any]) -> Any:
        """The process's client, built by ``build`` on first use (again in a forked child)."""
        client, pid = self._client, os.getpid()
        if client is not None and self._client_pid == pid:
            return client
        with self._lock:
            if self._client is None or self._client_pid != pid:
                self._client = build()
                self._client_pid = pid
            return self._client

    def built_client(self) -> Any:
        """The client if this process built one (None otherwise): nothing is built."""
        return self._client if self._client_pid == os.getpid() else None

    def drop_client(self) -> Any:
        """Forget the client; returns it (None if none) for the caller to close."""
        with self._lock:
            old, self._client, self._client_pid = self._client, None, None
        return old

    def after_fork_in_child(self) -> None:
        # The parent's sockets must never be shared with the child: forget them unclosed.
        self._client, self._client_pid = None, None


_current: Runtime | None = None
_install_lock = threading.Lock()


def current() -> Runtime:
    """The runtime in use (built on first use if nothing installed one)."""
    rt = _current
    if rt is None:
        with _install_lock:
            if _current is None:
                install(Runtime())
            rt = _current
            assert rt is not None
    return rt


def install(rt: Runtime) -> Runtime:
    """Make ``rt`` the process's runtime (``AppConfig.ready()``; a test's fresh one)."""
    global _current
    _current = rt
    return rt


def _after_fork_in_child() -> None:
    rt = _current
    if rt is not None:
        rt.after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
