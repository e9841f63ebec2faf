"""The process's runtime: every piece of state this process keeps between calls, in one
object (docs/internals.md, "The runtime").

- the Redis client (one per process, so one connection pool; dropped in a forked child,
  whose parent's sockets must never be shared);
- the scripts loaded (:mod:`.scripts`), and who is told of each script run (the
  worker's fetch round-trip counter, when metrics are on);
- the queue listing's throttle (:mod:`.listing`: when this process last listed a queue);
- the state each module keeps, one instance of its own class (:meth:`Runtime.of`): the
  outage reporter (:mod:`.errors`), the writes Redis refused while it was away, kept in
  memory and retried (each a :class:`.deferred.Deferred`: the stats counts, flushed
  every beat; lock releases and django.tasks result writes, retried every beat), the
  history buffer, the admin's caches, the test modes' records...;
- the limiter leases this process holds (controls/limits.py), and what a worker process
  sets at its start: its identity (written in its leases) and its limiter waker's hook
  (told of a lease released, a job parked).

What a module registers for the process's life, at import or in ``ready()`` (the jobs,
the departure listeners...), is held apart (:func:`registered`): a test's fresh runtime
keeps it. This module imports nothing of the package: every other module may use it.

:func:`current` is the one in use. ``AppConfig.ready()`` builds it (:func:`install`); a
process that never loads the app builds one on first use. A test gets a fresh one
(:func:`install` again) instead of clearing private state module by module.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Slots:
    """One instance of each state class asked for, built on first use (``kind()``): the
    state a module keeps, held here instead of in a module global. The class is the key,
    so each module's state is typed and private to the module that defines its class."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.built: dict[type, Any] = {}  # read without the lock (hot paths ask often)

    def get(self, kind: type[T]) -> T:
        found = self.built.get(kind)
        if found is None:
            with self._lock:
                found = self.built.get(kind)
                if found is None:
                    found = self.built[kind] = kind()
        return found


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
        self.leases = HeldLeases()
        # A worker's start sets these (the Controls plugin, worker/plugins.py).
        self.identity = f"{socket.gethostname().split('.')[0]}:{os.getpid()}"
        self.limit_wake: Callable[[tuple[str, ...], bool], Any] | None = None
        self._slots = Slots()
        self._built = self._slots.built

    def of(self, kind: type[T]) -> T:
        """This runtime's instance of the state class ``kind`` (a module's own state: the
        history buffer, the admin's caches, the test modes' records...)."""
        found = self._built.get(kind)  # (on hot paths: one lookup, no further call)
        return found if found is not None else self._slots.get(kind)

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

# What is registered for the process's life, at import or by AppConfig.ready(): the jobs,
# the departure listeners, the test modes' runner, ... A test's fresh runtime keeps them
# (ready() runs once).
_registrations = Slots()


# registered(Cls): the process's instance of the registration class ``Cls`` (never
# replaced). The bound method itself: conf.get() asks for one on every read.
registered = _registrations.get


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
