"""Features provided by other modules of the package (periodic control, run history,
the key guard's quarantine), imported lazily: until a module exists the api reports it
"not available" instead of failing, so the admin works whatever lands first.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class Unavailable(RuntimeError):
    """The module providing this feature is not installed (or lacks the function)."""


def load(module: str) -> ModuleType | None:
    """``module``, or None when it (or its package) does not exist. An ImportError from
    inside an existing module is a bug there and is raised."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module == missing or module.startswith(missing + ".")):
            return None
        raise


def function(module: str, name: str):
    mod = load(module)
    fn = getattr(mod, name, None) if mod is not None else None
    if not callable(fn):
        raise Unavailable(f"{module}.{name} is not available in this installation")
    return fn


def available(module: str, *names: str) -> bool:
    mod = load(module)
    return mod is not None and all(callable(getattr(mod, n, None)) for n in names)
