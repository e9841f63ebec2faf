"""The suite's shape: how many test files start a worker process (``manage.py cogworker``).

A real process costs seconds of boot and belongs to tests about what only a process has:
signals, exit codes, the command's output and argument parsing, forks (``--processes``),
SIGKILL/SIGSTOP, RSS. Everything else runs on the in-process worker (the ``inworker``
fixture, cogworker_django/worker/inprocess.py). So a file that starts one says why in a
module docstring line ``Processes: <reason>``, and the number of such files is capped.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MAX_PROCESS_FILES = 30
REASON = "Processes:"

# Helpers that start ``manage.py cogworker`` (tests/helpers.py, tests/periodic/db_support.py).
STARTERS = {"Worker", "start_workers"}
# The conftest fixture that starts one.
FIXTURE = "worker"


def _called(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return ""


def starts_process(tree: ast.Module) -> bool:
    """True when the module starts ``manage.py cogworker``: through the ``worker`` fixture
    (a parameter of a test or fixture, or ``getfixturevalue``), a ``Worker``/
    ``start_workers`` call, or ``run_command``/``subprocess`` with a "cogworker" argument
    anywhere in the module (``run_command(prefix, *args)`` with the arguments in a list)."""
    says_cogworker = any(
        isinstance(n, ast.Constant) and n.value == "cogworker" for n in ast.walk(tree)
    )
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            params = node.args.args + node.args.kwonlyargs
            if any(a.arg == FIXTURE for a in params):
                return True
        if isinstance(node, ast.Call):
            name = _called(node)
            if name in STARTERS:
                return True
            if name == "getfixturevalue" and any(
                isinstance(a, ast.Constant) and a.value == FIXTURE for a in node.args
            ):
                return True
            if says_cogworker and name in {"run_command", "run", "Popen", "check_output"}:
                return True
    return False


def process_files() -> dict[str, str | None]:
    """Each test file that starts a worker process -> its ``Processes:`` reason (None if
    its docstring gives none)."""
    found: dict[str, str | None] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        if "django_tasks" in path.parts:  # django-tasks' own suite, vendored: no worker
            continue
        tree = ast.parse(path.read_text(), str(path))
        if not starts_process(tree):
            continue
        doc = ast.get_docstring(tree) or ""
        reasons = [
            line.strip()[len(REASON) :].strip()
            for line in doc.splitlines()
            if line.strip().startswith(REASON)
        ]
        found[str(path.relative_to(TESTS))] = reasons[0] if reasons else None
    return found


def test_the_scan_sees_each_way_of_starting_a_worker():
    def scan(source: str) -> bool:
        return starts_process(ast.parse(source))

    assert scan("def test_a(worker):\n    worker()")
    assert scan("def test_a(prefix):\n    Worker(prefix).start()")
    assert scan("def test_a(prefix):\n    run_command(prefix, 'cogworker', '-c', '0')")
    assert scan("A = ['cogworker']\ndef test_a(prefix):\n    run_command(prefix, *A)")
    assert scan("def f(request):\n    request.getfixturevalue('worker')")
    assert scan("def test_a(worker):\n    start_workers(worker, 'default', 2)")
    assert not scan("def test_a(inworker):\n    inworker()")
    assert not scan("def test_a(prefix):\n    run_command(prefix, 'cogworker_status')")
    assert not scan("def test_a(prefix):\n    run_command(prefix, 'check')")


def test_process_files_are_few_and_say_why():
    found = process_files()
    unexplained = sorted(name for name, reason in found.items() if not reason)
    assert not unexplained, (
        f"these test files start manage.py cogworker without a {REASON!r} line in their "
        f"module docstring (what needs the real process?): {unexplained}"
    )
    assert len(found) <= MAX_PROCESS_FILES, (
        f"{len(found)} test files start manage.py cogworker (at most {MAX_PROCESS_FILES}): "
        "move what needs no process to the in-process worker (the inworker fixture)\n"
        + "\n".join(f"  {name}: {reason}" for name, reason in sorted(found.items()))
    )
