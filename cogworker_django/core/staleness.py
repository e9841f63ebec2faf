"""Whether this process runs code older than its files: the likely cause of a job that
"is not registered" in a worker started before the job was written, and of an edited
job body that still runs its old code.

- :func:`hint` answers for a payload's ``func``: its module's file changed (or was
  created) after this process loaded its jobs, so "restart the worker" is what to do;
- :class:`Watch` notices, once per file, that a job module this process imported has
  changed on disk since (the worker's ``Code watch`` plugin logs it).

Nothing named by a payload is ever imported here (a payload must not be a way to run
code): a module not yet imported is looked for as a file beside its imported parent
package, and only ``os.stat`` touches it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable

from ..store import runtime


# When this process loaded its code (the worker's start: it imports its job modules
# then; worker/plugins.py's CodeWatch sets it). Until then, this module's import.
# (Registered for the process's life: store/runtime.registered.)
class _Loaded:
    def __init__(self) -> None:
        self.at = time.time()


runtime.registered(_Loaded)  # (the import's time, until a worker's start says)


def mark_loaded(at: float | None = None) -> None:
    """This process has loaded its job modules (at ``at``, default now)."""
    runtime.registered(_Loaded).at = time.time() if at is None else at


def loaded_at() -> float:
    return runtime.registered(_Loaded).at


def _mtime(path: str | None) -> float | None:
    if not path:
        return None
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _source_of(module_name: str) -> str | None:
    """The file of ``module_name``: an imported module's ``__file__``, or a ``.py`` file
    (or a package's ``__init__.py``) beside its imported parent package; never imports."""
    module = sys.modules.get(module_name)
    if module is not None:
        return getattr(module, "__file__", None)
    parent_name, _, leaf = module_name.rpartition(".")
    if parent_name:
        parent = sys.modules.get(parent_name)
        dirs = list(getattr(parent, "__path__", None) or []) if parent is not None else []
    else:
        dirs = [p for p in sys.path if isinstance(p, str)]
    for folder in dirs:
        for candidate in (
            os.path.join(folder or ".", leaf + ".py"),
            os.path.join(folder or ".", leaf, "__init__.py"),
        ):
            if os.path.isfile(candidate):
                return candidate
    return None


def hint(func: object) -> str:
    """For a payload naming ``func`` (a dotted path) that is not registered: a sentence
    saying to restart the worker when the function's module file is newer than this
    process's code, else ""."""
    if not isinstance(func, str) or "." not in func:
        return ""
    parts = func.split(".")
    # "pkg.mod.Class.method": the module is the longest prefix that is one (a file).
    for end in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:end])
        path = _source_of(name)
        if path is None:
            continue
        changed, loaded = _mtime(path), loaded_at()
        if changed is None or changed <= loaded:
            return ""
        imported = name in sys.modules
        return (
            f"its module {name} ({path}) {'changed' if imported else 'appeared'} after this "
            f"worker started ({_clock(changed)}, the worker's code is of {_clock(loaded)}): "
            "restart the worker (in development, `manage.py cogworker --reload` restarts it "
            "on every change)"
        )
    return ""


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def job_module_files(modules: Iterable[str]) -> dict[str, str]:
    """name -> file of each of ``modules`` that is imported and has a file."""
    found = {}
    for name in modules:
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str) and path:
            found[name] = path
    return found


class Watch:
    """The files of the job modules this process imported, with their times at the
    start: :meth:`changed` returns those changed since, each once."""

    def __init__(self, files: dict[str, str]) -> None:
        self._files = files
        self._at = {name: _mtime(path) for name, path in files.items()}
        self._told: set[str] = set()

    def changed(self) -> list[tuple[str, str]]:
        """(module, file) of each watched file changed (or gone) since the start, not
        reported before."""
        found = []
        for name, path in self._files.items():
            if name in self._told:
                continue
            if _mtime(path) != self._at[name]:
                self._told.add(name)
                found.append((name, path))
        return found


def not_registered(func: object) -> str:
    """The dead entry's message for a payload naming ``func``, which no ``@job``
    registered here: "restart the worker" when its module is newer than this process's
    code, else where a worker finds jobs."""
    from .jobs import where_jobs_live

    why = hint(func)
    return (
        f"{func!r} is not a registered job; it was not imported or run ({why or where_jobs_live()})"
    )
