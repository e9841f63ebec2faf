"""What a worker does at start for the django.tasks backend (called by the worker's
django.tasks plugin, worker/plugins.py; a no-op before Django 6.0 or when ``TASKS``
doesn't use it).

- :func:`validate`, on the main thread before any job runs: loads every ``TASKS``
  alias that is a ``CogworkerBackend`` (bad ``OPTIONS`` stop the worker with a clear
  error), which imports the backend module and so registers the ``"task"`` payload kind;
  then imports each installed app's ``tasks`` module, so the tasks it defines can run
  (resolve.py: a worker never imports a module because a payload names it). A tasks
  module that fails to import is logged, not fatal: Django apps may ship a ``tasks.py``
  for another task system, and only that module's tasks are refused (they go to dead
  with the import error).
- :func:`start`, when the worker starts: this process's identity becomes the worker id
  recorded in results. (The plugin's beat retries result writes deferred by an outage:
  store.retry_pending.) Django's own records on its ``django.tasks`` logger are left as
  Django's backends emit them, at their levels: users' logging listens to them.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket

from django.core.exceptions import ImproperlyConfigured

from ..store import runtime
from . import available

log = logging.getLogger("cogworker_django")


class _Worker:
    """The identity of the worker running in this process (None: none), on its runtime."""

    identity: str | None = None


def _worker() -> _Worker:
    return runtime.current().of(_Worker)


def worker_id() -> str:
    """The id recorded in ``worker_ids``: the worker process's identity (as in the admin)."""
    return _worker().identity or f"{socket.gethostname()}:{os.getpid()}"


def in_worker() -> bool:
    return _worker().identity is not None


def our_aliases() -> list[str]:
    """The ``TASKS`` aliases served by a CogworkerBackend (loading them)."""
    if not available():
        return []
    from django.conf import settings
    from django.tasks import task_backends

    from .resolve import is_ours

    found = []
    for alias, params in (getattr(settings, "TASKS", None) or {}).items():
        try:
            backend = task_backends[alias]
        except ImproperlyConfigured:
            if "cogworker_django" in str(params.get("BACKEND", "")):
                raise
            continue  # another backend's problem (Django's system checks report it)
        if is_ours(backend):
            found.append(alias)
    return found


def import_app_tasks_modules() -> list[str]:
    """Import ``<app>.tasks`` of every installed app that has one; returns those imported."""
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    imported = []
    for config in apps.get_app_configs():
        if not module_has_submodule(config.module, "tasks"):
            continue
        name = f"{config.name}.tasks"
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - see the module docstring
            log.error("%s could not be imported; its tasks will not run here: %r", name, exc)
            continue
        imported.append(name)
    return imported


def validate() -> None:
    if our_aliases():
        import_app_tasks_modules()


def start(identity: str) -> None:
    if not available():
        return
    _worker().identity = identity


def stop() -> None:
    """The worker stopped (an in-process one leaves the process running on)."""
    _worker().identity = None
