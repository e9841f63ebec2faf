"""Optional worker parts that plug into the launcher: each returns objects with
``start()`` and ``stop()``, and may register poller timers or heartbeat hooks."""

from __future__ import annotations

from typing import Any


def build(launcher: Any) -> list[Any]:
    components: list[Any] = []
    from .. import history

    if history.enabled():
        components.append(history.HistoryFlusher(launcher.identity))
    return components


def validate() -> None:
    """Checks at worker start, after job modules are imported (ImproperlyConfigured)."""
