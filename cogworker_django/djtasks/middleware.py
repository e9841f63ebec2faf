"""The built-in server middleware of django.tasks tasks: results and Django's signals.

Given by the worker's django.tasks plugin (``worker/plugins.py``), so every worker imports this
module, Django 5.2 included: it imports nothing from ``django.tasks`` itself and passes
every payload that is not a ``"task"`` straight through. What it does for a task is in
lifecycle.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import KIND


class TaskResultMiddleware:
    payload_fields = ("kind",)  # only a "task" payload has work here (RunChain)

    def __call__(self, job: dict[str, Any], queue: str, run: Callable[[], Any]) -> Any:
        if job.get("kind") != KIND:
            return run()
        # Only a CogworkerBackend enqueues "task" payloads, and only on Django 6.0+; on an
        # older worker the resolver is missing and the job went to dead before this.
        from . import lifecycle

        return lifecycle.run(job, run)
