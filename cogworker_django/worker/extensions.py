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
    from ..durable import chore

    # The durable enqueue's outboxes: every poll (a timer of interval 0), in every process.
    launcher.poller.timers.append(("Durable outbox relay", 0.0, chore.Chore()))
    if history.enabled():
        components.append(history.HistoryFlusher(launcher.identity))
    if conf.get().LIMITS:
        from .limit_waker import LimitWaker

        # Jobs waiting for a limiter go to their queues as soon as it has room.
        source = launcher.manager.source
        components.append(LimitWaker(nudge=getattr(source, "nudge", None)))
    from ..periodic import entries, running_lock, ticker

    # Periodic: every process keeps its until_executed runs' locks alive, and ticks when
    # entries are configured (entries resolved here, on the main thread: rule 10).
    running_lock.register_heartbeat_hook()
    periodic = entries.load()
    if periodic:
        components.append(
            ticker.Ticker(
                periodic,
                ready=lambda: launcher.recovery.completed_once,
                started_at=launcher.started_at,
                identity=launcher.identity,
            )
        )
    from ..djtasks import worker_setup

    # django.tasks backend (Django 6.0+): worker id for results, deferred result writes.
    components.extend(worker_setup.build(launcher))
    return components


def validate() -> None:
    """Checks at worker start, after job modules are imported (ImproperlyConfigured)."""
    from ..periodic import entries

    entries.load()  # each bad COGWORKER_PERIODIC entry names itself and its field
    from ..djtasks import worker_setup

    # django.tasks backend, when TASKS uses it: its "task" kind, the apps' tasks modules.
    worker_setup.validate()
    from .. import jobs
    from ..controls import options

    # Job controls: every registered job's limiters exist in COGWORKER["LIMITS"] (a job
    # module imported before the settings were configured was not checked then).
    options.check_registered_jobs(jobs.registered_jobs())
