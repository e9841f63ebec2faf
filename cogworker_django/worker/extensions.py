"""Optional worker parts that plug into the launcher: each returns objects with
``start()`` and ``stop()``, and may register poller timers or heartbeat hooks."""

from __future__ import annotations

from typing import Any


def build(launcher: Any) -> list[Any]:
    components: list[Any] = []
    from .. import conf, history, keyguard

    # Key guard: at boot and every KEYGUARD_INTERVAL, in every process (rule 9).
    guard = keyguard.timer(q.name for q in launcher.queues)
    launcher.poller.timers.append(("Key guard", conf.get().KEYGUARD_INTERVAL, guard))
    if history.enabled():
        components.append(history.HistoryFlusher(launcher.identity))
    return components


def validate() -> None:
    """Checks at worker start, after job modules are imported (ImproperlyConfigured)."""
