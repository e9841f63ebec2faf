"""The old import paths of the modules that moved into folders (after 0.1.0): ``cogworker_django.logs``
is ``cogworker_django.observe.logs``, and so on down the table.

Old paths outlive a move: settings name classes by dotted path (LOGGING's
``cogworker_django.logs.JSONFormatter``), a django.tasks result keeps its exception's
class path in Redis (``cogworker_django.jobs.NotRegistered``) and is read back by
importing it, and applications import documented names from these modules. An old path
gives the very same module object as the new one (classes stay identical, ``isinstance``
holds), imported the first time it is asked for; nothing is imported for a path no one
uses. New code, the package's own included, imports the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

# old module name under the package -> where it lives now
MOVED = {
    **{
        m: f"store.{m}"
        for m in ("cluster", "codec", "connection", "errors", "homes", "keys", "outbox", "scripts")
    },
    **{
        m: f"core.{m}"
        for m in (
            "client",
            "commandline",
            "departures",
            "jobs",
            "locks",
            "middleware",
            "payload",
            "priority",
            "recording",
            "signatures",
            "taskcontext",
            "testrun",
            "unique",
        )
    },
    **{m: f"observe.{m}" for m in ("logs", "runlog", "stats", "telemetry", "tracing")},
    "keyguard": "worker.keyguard",
}


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``<package>.<old>`` (asked only after the regular finders found no file) and
    loads it as the module at its new path."""

    def __init__(self, package: str) -> None:
        self.table = {f"{package}.{old}": f"{package}.{new}" for old, new in MOVED.items()}
        self._specs: dict[str, Any] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.table:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.table[spec.name])
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just set the alias's spec on the module: its own back,
        # so that its relative imports and its name stay those of the new path.
        alias = module.__spec__
        if alias is not None and alias.name in self._specs:
            module.__spec__ = self._specs.pop(alias.name)


def install(package: str) -> None:
    if not any(isinstance(f, OldPaths) for f in sys.meta_path):
        sys.meta_path.append(OldPaths(package))
