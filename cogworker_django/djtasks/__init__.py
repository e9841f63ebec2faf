"""The ``django.tasks`` backend (Django 6.0+): Django's task API over cogworker's queues.

Public path: ``cogworker_django.tasks_backend.CogworkerBackend``. (Not named ``tasks``:
that is the module name Django and the backend itself look for in every app, so this
package would be taken for the app's own tasks.) Modules:

- ``backend``: the backend (validate, enqueue, get_result, check) [Django 6.0+];
- ``resolve``: which ``module_path`` may run: only a ``Task`` of a ``CogworkerBackend``;
- ``runner``: the ``"task"`` payload kind: runs a task (context, async, return value)
  [Django 6.0+];
- ``middleware``: the built-in server middleware that writes results and sends Django's
  signals (imported by every worker, so it imports nothing from ``django.tasks`` itself);
- ``store`` / ``results``: the ``P:result:<id>`` hash (and its timestamps), and its
  conversion to ``TaskResult``;
- ``worker_setup``: what a worker does at start when ``TASKS`` names this backend.

Only ``backend``, ``runner`` and ``results`` need ``django.tasks``; the others import
on Django 5.2 too, where they do nothing.
"""

from __future__ import annotations

import django

# The payload "kind" of a django.tasks task (jobs.register_kind).
KIND = "task"


def available() -> bool:
    """True when this Django has ``django.tasks`` (6.0+)."""
    return django.VERSION >= (6, 0)
