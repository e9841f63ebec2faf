"""The package's layers (docs/internals.md, "Layers"): a module imports from its own
layer or a lower one. Every module has a layer here; a new one must be given one, and an
import that goes up fails unless it is one of the few listed below, each with its reason
(imports inside functions count; ``TYPE_CHECKING`` blocks don't)."""

from __future__ import annotations

import ast
from pathlib import Path

from .test_import_graph import NAME, PACKAGE, _modules, _typing_only

ORDER = ("base", "jobs", "run", "read", "face")

# Module (or package: every module under it) -> layer; the longest name that matches wins.
LAYER = {
    # base: settings, the Redis seam, payloads, errors
    "conf": "base",
    "_moved": "base",  # the old import paths (imports nothing of the package)
    "store": "base",  # the Redis seam: connection, keys, homes, scripts, codec, outbox, errors
    "core.payload": "base",
    "core.argcodec": "base",  # the tagged form of argument values, which payloads hold
    "core.taskcontext": "base",
    "core.testrun": "base",  # whether this is a test run: conf's test prefix asks it
    "controls.spec": "base",  # a LIMITS entry parsed: conf validates the setting with it
    # jobs: what an application calls, and what every push and run share
    "core": "jobs",
    "durable": "jobs",
    "controls": "jobs",
    "workflows": "jobs",
    "djtasks": "jobs",  # the payload kind and its resolution; the backend is "face"
    # run: the worker and what runs inside it
    "worker": "run",
    "observe": "run",  # stats, telemetry, tracing, the run log, log formatting
    "periodic": "run",
    "history": "run",
    "durable.chore": "run",  # the worker's relay of what the outboxes hold
    "djtasks.lifecycle": "run",  # a task's run inside the worker
    "djtasks.runner": "run",
    "djtasks.middleware": "run",
    "djtasks.worker_setup": "run",
    # read: the API the admin and operators use
    "api": "read",
    # face: Django's side (admin, command, backend, views, checks, test helpers)
    "admin": "face",
    "management": "face",
    "tasks_backend": "face",
    "djtasks.backend": "face",
    "testing": "face",
    "pytest_plugin": "face",
    "checks": "face",
    "apps": "face",
    "models": "face",
    "templatetags": "face",
    "metrics": "face",
    "": "face",  # the package's own __init__: the public names
}

# Imports that go up, each for a reason (an entry that no longer goes up fails too).
ALLOWED_UP = {
    # The worker's metrics are served by the same Prometheus helpers and token check as
    # the deployment's view (metrics.py).
    ("observe.telemetry", "metrics"),
    # A durable outbox's size and age, for the worker's warning about an old row.
    ("durable.chore", "api.outbox"),
    # A batch's progress as the API shows it (Batch.status), from the batch itself.
    ("workflows.batch", "api.batches"),
}


def layer_of(module: str) -> str:
    name = module[len(NAME) + 1 :] if module != NAME else ""
    best = max((k for k in LAYER if k == "" or name == k or name.startswith(k + ".")), key=len)
    return LAYER[best]


def _resolve(module: str, path: Path, node: ast.ImportFrom | ast.Import, modules: dict) -> set:
    """The modules an import statement takes names from: ``from .x import y`` is module
    ``x.y`` when there is one, else ``x`` (a name defined there)."""
    out = set()
    if isinstance(node, ast.Import):
        candidates = [a.name for a in node.names]
    else:
        base = module.split(".")
        if node.level:
            if path.name != "__init__.py":
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        candidates = [
            f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin
            for a in node.names
            # The version string: set in the package's __init__ before it imports anything.
            if not (origin == NAME and a.name == "__version__")
        ]
    for name in candidates:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name.startswith(NAME) and name != module:
            out.add(name)
    return out


def _edges() -> set[tuple[str, str]]:
    modules = _modules()
    edges = set()
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = _typing_only(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
                edges |= {(module, t) for t in _resolve(module, path, node, modules)}
    return edges


def _short(module: str) -> str:
    return module[len(NAME) + 1 :] if module != NAME else ""


def up_imports(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    return {
        (_short(a), _short(b))
        for a, b in edges
        if ORDER.index(layer_of(b)) > ORDER.index(layer_of(a))
    }


def test_every_module_is_in_a_layer():
    # (the "" entry catches nothing but the package itself)
    stray = [
        m
        for m in _modules()
        if m != NAME
        and not any(_short(m) == k or _short(m).startswith(k + ".") for k in LAYER if k)
    ]
    assert stray == [], f"give these a layer in LAYER: {stray}"


def test_no_import_goes_up_a_layer():
    up = up_imports(_edges())
    assert up - ALLOWED_UP == set(), "imports that go up a layer (docs/internals.md, Layers)"
    assert ALLOWED_UP - up == set(), "listed as going up, no longer does: drop it from ALLOWED_UP"


def test_the_check_sees_an_import_that_goes_up():
    edges = {
        (f"{NAME}.store.keys", f"{NAME}.worker.processor"),
        (f"{NAME}.worker.fetch", f"{NAME}.store.keys"),
    }
    assert up_imports(edges) == {("store.keys", "worker.processor")}
    assert layer_of(f"{NAME}.djtasks.backend") == "face"
    assert layer_of(f"{NAME}.djtasks.store") == "jobs"
    assert layer_of(NAME) == "face"
    assert layer_of(PACKAGE.name + ".controls.spec") == "base"


def test_the_top_level_holds_twelve_modules_or_fewer():
    # The rest live in folders that show the layers (docs/internals.md, "Layers").
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top


def test_a_module_over_400_lines_states_why():
    # Long modules are allowed where their parts only make sense together; the module's
    # docstring says so ("Over 400 lines: ..."), so a reader knows it was meant.
    unstated = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 400:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Over 400 lines:" not in doc and "Longer than 400 lines" not in doc:
                unstated.append(str(path.relative_to(PACKAGE)))
    assert unstated == [], f"modules over 400 lines without a stated reason: {unstated}"


def test_the_queue_listing_is_written_in_one_place():
    # P:queues is written from Python only by store/listing.py (add, remove), so its
    # refresh and its report are the same for every writer; scripts take it as a key.
    writers = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "listing.py"
        and any(f"{verb}(keys.queues()" in path.read_text() for verb in ("sadd", "srem"))
    ]
    assert writers == []


def test_the_read_layer_starts_no_thread():
    # api/ reads; work in the background is owned below it (the history's digest:
    # history/background.py), where its lifetime and failures are looked after.
    starters = [
        str(path.relative_to(PACKAGE))
        for path in sorted((PACKAGE / "api").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "Thread"
    ]
    assert starters == []


# The suite's own checks of the code, the docs and the Makefile: at the top of tests/.
SUITE_CHECKS = (
    "test_docs_site",
    "test_global_state",
    "test_import_graph",
    "test_internals_doc",
    "test_layers",
    "test_makefile",
    "test_messages",
    "test_persistence",
    "test_public_api",
    "test_reliability_doc",
    "test_suite_shape",
)


def test_the_tests_mirror_the_package():
    # A folder of tests is a folder of the package; a test file at the top tests a
    # top-level module (test_<module>[_...]) or is one of the suite's own checks.
    tests = Path(__file__).resolve().parent
    folders = sorted(p.name for p in tests.iterdir() if (p / "__init__.py").is_file())
    assert [f for f in folders if not (PACKAGE / f / "__init__.py").is_file()] == []
    top_modules = {p.stem.lstrip("_") for p in PACKAGE.glob("*.py")}
    stray = [
        p.name
        for p in sorted(tests.glob("test_*.py"))
        if p.stem not in SUITE_CHECKS
        and not any(p.stem == f"test_{m}" or p.stem.startswith(f"test_{m}_") for m in top_modules)
    ]
    assert stray == [], f"test files to put in the folder of the module they test: {stray}"


# Where a lower module lets code above it install itself (docs/internals.md, "Seams
# instead of import circles"): each installer and the only modules that call it.
SEAMS = {
    "install_member_pushers": {"workflows/batch.py"},
    "install_mode_sink": {"testing.py"},
    "set_diverter": {"testing.py"},
    "set_runner": {"testing.py"},
    "register_kind": {"djtasks/backend.py"},
    "add_listener": {"apps.py"},
    "install_enqueue_plugins": {"__init__.py"},
}


def test_every_seam_is_installed_where_this_table_says():
    found: dict[str, set[str]] = {name: set() for name in SEAMS}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if name in found:
                    found[name].add(str(path.relative_to(PACKAGE)))
    assert found == SEAMS
    doc = (PACKAGE.parent / "docs" / "internals.md").read_text()
    assert all(f".{name}`" in doc for name in SEAMS)


# Every lock of the run layer, where it is made, and what it guards (a Condition made on
# one of them shares its site). A new one fails here: the run layer keeps one discipline
# per piece of state (docs/internals.md, "The ledger").
RUN_LAYER_LOCKS = {
    "worker/ledger.py": "every fetched job's state, and the fetches out (its Condition too)",
    "worker/dispatch.py": "which thread or slot gets which job, and the fetch connections",
    "worker/heartbeat.py": "the clearance: since when Redis answered without a break",
    "worker/keyguard.py": "the last quarantine stamp given, strictly increasing in the process",
}


def test_the_run_layer_makes_at_most_four_locks():
    found: dict[str, int] = {}
    for path in sorted((PACKAGE / "worker").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("Lock", "RLock")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "threading"
            ):
                name = path.relative_to(PACKAGE).as_posix()
                found[name] = found.get(name, 0) + 1
    assert found == dict.fromkeys(RUN_LAYER_LOCKS, 1)
    assert len(found) <= 4
