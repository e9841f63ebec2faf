"""The public surface: what an application imports comes from ``cogworker_django``, every
exception of the package derives from ``CogworkerError``, and no module reaches into
another's underscored names (each module's private state stays its own)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import cogworker_django
from cogworker_django import CogworkerError

PACKAGE = Path(cogworker_django.__file__).resolve().parent
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


def test_everything_in_all_is_importable_from_the_package():
    for name in cogworker_django.__all__:
        assert getattr(cogworker_django, name) is not None, name
    # The modules a user names in settings or imports by name.
    for module in ("api", "testing", "tasks_backend", "middleware", "pytest_plugin"):
        importlib.import_module(f"cogworker_django.{module}")
    from cogworker_django.tasks_backend import CogworkerBackend  # noqa: F401 - API.md's path


def _exception_classes():
    for path in SOURCES:
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                yield module, node.name


def test_every_exception_class_derives_from_cogworker_error():
    found = []
    for module, name in _exception_classes():
        mod = importlib.import_module(module)
        cls = getattr(mod, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
            assert issubclass(cls, CogworkerError), f"{module}.{name}"
    assert len(found) >= 4  # the scan found the package's exceptions


def _package_module_names(tree: ast.Module, path: Path) -> set[str]:
    """Local names bound to modules of this package by imports in ``tree``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module or "").startswith("cogworker_django")
        ):
            for alias in node.names:
                names.add(alias.asname or alias.name)
    return names


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_uses_another_modules_underscored_names(path):
    tree = ast.parse(path.read_text())
    modules = _package_module_names(tree, path)
    offending = [
        f"{node.value.id}.{node.attr} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in modules
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    ]
    assert offending == []
