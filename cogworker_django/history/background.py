"""The run history's background work in a process that reads it: the first reading of
the digest (``api.History.digest(wait=False)``, asked by an admin page) is built on a
thread owned here, so a page stays fast whatever the history holds and the read layer
starts no thread of its own.

:class:`Builds` is the one owner of those threads (kept on the process's runtime): at
most one per stream key at a time, named ``history-digest``, daemon (a web process's
exit never waits for one), its failure reported once under "History digest" (the next
ask starts another).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..store import errors, runtime

THREAD_NAME = "history-digest"
COMPONENT = "History digest"


class Builds:
    """This process's background builds of the history's digest, by stream key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}

    def start(self, key: str, build: Callable[[], object]) -> bool:
        """Run ``build()`` on a thread of its own unless one for ``key`` still runs; True
        when this call started it."""
        with self._lock:
            running = self._threads.get(key)
            if running is not None and running.is_alive():
                return False
            thread = threading.Thread(
                target=self._run, args=(key, build), name=THREAD_NAME, daemon=True
            )
            self._threads[key] = thread
        thread.start()
        return True

    def running(self, key: str) -> bool:
        with self._lock:
            thread = self._threads.get(key)
        return thread is not None and thread.is_alive()

    def wait(self, key: str, timeout: float | None = None) -> bool:
        """Wait for the build of ``key`` to end (True when none runs by then)."""
        with self._lock:
            thread = self._threads.get(key)
        if thread is not None:
            thread.join(timeout)
        return not self.running(key)

    def _run(self, key: str, build: Callable[[], object]) -> None:
        try:
            build()
        except Exception as exc:  # noqa: BLE001 - the next ask tries again
            errors.report(COMPONENT, exc)
        finally:
            with self._lock:
                if self._threads.get(key) is threading.current_thread():
                    del self._threads[key]


def builds() -> Builds:
    return runtime.current().of(Builds)
