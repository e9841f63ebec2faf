"""A job leaving the system without a run that settles it: sent to dead as a poison job
(orphaned too often) or as one with no queue, or deleted, killed or cleared by an
operator. Everything tied to the job is let go: its locks, always
(``locks.release_job_locks``), and whatever a listener registered for (the django.tasks
backend marks the task's result FAILED). Listeners are best-effort (rule 4).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..store import errors, runtime
from . import locks


class JobLeft(errors.CogworkerError):
    """What a django.tasks result names as its last error when its task left without a
    run that settled it (its ``exception_class_path``, kept as
    ``cogworker_django.departures.JobLeft``: the path results already in Redis hold)."""


class Listeners(list[Callable[[dict[str, Any], str], None]]):
    """f(job, reason): called for every departing job; registered at startup (apps.py),
    for the process's life (store/runtime.registered)."""


def listeners() -> Listeners:
    return runtime.registered(Listeners)


def job_left(job: dict[str, Any], reason: str) -> None:
    """``job`` is gone for good, for ``reason`` (a short sentence for humans)."""
    if locks.job_locks(job):
        locks.release_job_locks(job)
    for listener in list(listeners()):
        errors.best_effort("Departure", functools.partial(listener, job, reason))


def add_listener(listener: Callable[[dict[str, Any], str], None]) -> None:
    registered = listeners()
    if listener not in registered:
        registered.append(listener)
