"""The package's process-global mutable state, found by reading its source (AST), kept
to the short list below (docs/internals.md, "The runtime"). A new piece fails this test:
put it on the process's runtime (store/runtime.py) instead, where a test gets a fresh
one, or, if it truly belongs to the process, list it here with its reason.

What counts, at a module's top level:

- a *rebound global*: a name some function rebinds (``global x``), or that another
  module of the package assigns (``module.x = ...``);
- a *mutated container*: a dict, list, set, deque, ... that any code of the package
  changes in place (``x[k] = v``, ``del x[k]``, ``x.append(...)``, ``module.x.add(...)``);
- a *stateful singleton*: an instance of a package class that changes its own state
  after it is built (assigns ``self.<attr>`` outside ``__init__``, or changes a container
  it holds).

Not counted: constants (never changed), locks (they guard state, hold none), and state
per thread or per context (``threading.local()``, ``ContextVar``): no two runs share it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from .test_import_graph import NAME, _modules

# module-relative name -> why it is process-global (at most 10).
ALLOWED = {
    "store.runtime._current": (
        "the process's runtime, holding the rest (built by AppConfig.ready(); a test "
        "installs a fresh one)"
    ),
    "store.runtime._registrations": (
        "what is registered for the process's life at import or in ready() (the jobs, "
        "the departure listeners, the test-run state, the metrics, ...)"
    ),
    "conf._cache": "the settings read, dropped on setting_changed (read on every call)",
    "core.client._diverter": "the test modes' sink of the block in progress (testing.fake)",
    "core.client._installed": "whether the test modes' sinks are installed (ready())",
    "core.client._mode_sinks": "the test modes' sinks, installed once (ready())",
    "periodic.claims._failing": "the dead claims already said to fail (logged once)",
    "workflows.store._meta_cache": "the batches' descriptions this process has read",
}

MUTATORS = {
    "add",
    "append",
    "appendleft",
    "clear",
    "discard",
    "extend",
    "insert",
    "pop",
    "popitem",
    "popleft",
    "remove",
    "setdefault",
    "update",
    "__setitem__",
    "__delitem__",
}
CONTAINERS = {
    "dict",
    "list",
    "set",
    "defaultdict",
    "OrderedDict",
    "deque",
    "Counter",
    "WeakKeyDictionary",
    "WeakValueDictionary",
    "WeakSet",
}
# Per thread or per context: not shared by two runs.
SCOPED = {"local", "ContextVar"}


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute):
            return func.attr
    return None


def _is_container(value: ast.AST) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp):
        return True
    return _call_name(value) in CONTAINERS


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    """Names bound at the module's top level (outside any def or class) -> value."""
    found: dict[str, ast.AST] = {}

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if stmt.value is not None:
                    found[stmt.target.id] = stmt.value
            elif isinstance(stmt, ast.If | ast.Try):
                visit(stmt.body)
                visit(getattr(stmt, "orelse", []))
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return found


def _module_aliases(module: str, path: Path, tree: ast.Module, modules: dict) -> dict[str, str]:
    """Local name -> package module, for ``from . import x`` / ``import a.b as x``."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                full = f"{origin}.{alias.name}"
                if full in modules:
                    out[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules and alias.asname:
                    out[alias.asname] = alias.name
    return out


def _stateful_classes(trees: dict[str, ast.Module]) -> set[str]:
    """Names of package classes whose instances change after they are built: a method
    other than ``__init__`` changes ``self``, or ``__init__`` builds another such
    instance (a Writer holding its Backoff). Per-thread classes (``threading.local``
    subclasses) are not process state."""
    classes = [c for t in trees.values() for c in ast.walk(t) if isinstance(c, ast.ClassDef)]
    scoped = {
        c.name for c in classes if any(ast.unparse(b).split(".")[-1] in SCOPED for b in c.bases)
    }
    stateful = set()
    for cls in classes:
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and fn.name != "__init__":
                if any(_changes_self(node) for node in ast.walk(fn)):
                    stateful.add(cls.name)
    grew = True
    while grew:  # holding a stateful instance makes a class stateful
        grew = False
        for cls in classes:
            if cls.name in stateful:
                continue
            init = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
            built = {_call_name(n) for f in init for n in ast.walk(f) if isinstance(n, ast.Call)}
            if built & stateful:
                stateful.add(cls.name)
                grew = True
    return stateful - scoped


def _changes_self(node: ast.AST) -> bool:
    def on_self(expr: ast.AST) -> bool:
        while isinstance(expr, ast.Attribute | ast.Subscript):
            expr = expr.value
        return isinstance(expr, ast.Name) and expr.id == "self"

    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        return any(
            isinstance(t, ast.Attribute | ast.Subscript) and on_self(t)
            for target in targets
            for t in ast.walk(target)
        )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in MUTATORS and on_self(node.func.value)
    return False


def _root_name(expr: ast.AST) -> tuple[str | None, str | None]:
    """(module alias, name) of ``alias.name...`` or (None, name) of ``name...``."""
    while isinstance(expr, ast.Subscript) or (
        isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Attribute | ast.Subscript)
    ):
        expr = expr.value
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return expr.value.id, expr.attr
    if isinstance(expr, ast.Name):
        return None, expr.id
    return None, None


def global_state() -> dict[str, str]:
    """Every piece found: module-relative name -> kind."""
    modules = _modules()
    trees = {m: ast.parse(p.read_text()) for m, p in modules.items()}
    tops = {m: _top_level(t) for m, t in trees.items()}
    stateful = _stateful_classes(trees)
    found: dict[str, str] = {}
    mutated: dict[str, set[str]] = defaultdict(set)  # module -> its names changed in place
    rebound: dict[str, set[str]] = defaultdict(set)

    for module, tree in trees.items():
        aliases = _module_aliases(module, modules[module], tree, modules)
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                rebound[module].update(node.names)
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign | ast.Delete):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    if target.value.id in aliases:  # module.x = ...
                        rebound[aliases[target.value.id]].add(target.attr)
                if isinstance(target, ast.Subscript):
                    alias, name = _root_name(target.value)
                    owner = aliases.get(alias, module) if alias else module
                    if name:
                        mutated[owner].add(name)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in MUTATORS
            ):
                alias, name = _root_name(node.func.value)
                owner = aliases.get(alias, module) if alias else module
                if name and (alias is None or alias in aliases):
                    mutated[owner].add(name)

    for module, names in tops.items():
        short = module[len(NAME) + 1 :] if module != NAME else ""
        for name, value in names.items():
            key = f"{short}.{name}" if short else name
            if _call_name(value) in SCOPED:
                continue
            if name in rebound[module]:
                found[key] = "rebound global"
            elif _is_container(value) and name in mutated[module]:
                found[key] = "mutated container"
            elif _call_name(value) in stateful:
                found[key] = "stateful singleton"
    return found


def test_process_global_state_is_the_listed_few():
    found = global_state()
    new = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not new, (
        "process-global mutable state not listed (put it on store/runtime.py's Runtime, "
        f"or list it in ALLOWED with its reason): {new}"
    )
    gone = set(ALLOWED) - set(found)
    assert not gone, f"listed but no longer found (remove from ALLOWED): {sorted(gone)}"
    assert len(ALLOWED) <= 10


def test_the_scan_finds_each_kind():
    """The scan itself: each kind of state, written the ways the package writes it."""
    source = ast.parse(
        "import threading\n"
        "_cache = {}\n"
        "_seen: set[str] = set()\n"
        "CONST = {'a': 1}\n"
        "_n = 0\n"
        "_local = threading.local()\n"
        "def f(k):\n"
        "    global _n\n"
        "    _n += 1\n"
        "    _cache[k] = 1\n"
        "    _seen.add(k)\n"
    )
    tops = _top_level(source)
    assert set(tops) == {"_cache", "_seen", "CONST", "_n", "_local"}
    assert _is_container(tops["_cache"]) and _is_container(tops["_seen"])
    assert _call_name(tops["_local"]) in SCOPED
