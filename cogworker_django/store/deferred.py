"""Writes Redis refused while it was away, kept in this process's memory and retried
(docs/internals.md, "The runtime"): one primitive for the stats counts, the deferred lock
releases and the django.tasks result writes, each an instance on the process's runtime
(store/runtime.py)."""

from __future__ import annotations

import logging
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
