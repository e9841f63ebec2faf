"""The suite's shape: which test files start a worker process (``manage.py cogworker``).

A real process costs seconds of boot and belongs to tests about what only a process has:
signals, exit codes, the command's output and argument parsing, forks (``--processes``),
SIGKILL/SIGSTOP, RSS, threads as TTIN reports them, a fresh interpreter. Everything else
runs on the in-process worker (the ``inworker`` fixture, cogworker_django/worker/
inprocess.py). So every file that starts one is listed below with what needs the process,
a new one fails until it is given its reason, and their number may only go down.

The process tests of one fault share a file across the features: workers SIGKILLed
mid-run (worker/test_killed_mid_run.py), Redis faults under workers
(worker/test_faults_outage.py), TERM and the hand-over (worker/test_reliable_shutdown.py),
signals (worker/test_worker_signals.py), the command's output and exit codes
(worker/test_worker_command.py). A new process test joins the file of its fault.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# At most this many: lower it as files move to the in-process worker, or as the process
# tests of one fault join one file.
MAX_PROCESS_FILES = 30

# Helpers that start ``manage.py cogworker`` (tests/helpers.py, tests/periodic/db_support.py).
STARTERS = {"Worker", "start_workers"}
# The conftest fixture that starts one.
FIXTURE = "worker"

KILL = "workers SIGKILLed"
# Each test file that starts a worker process -> what needs the process.
REASONS = {
    "admin/test_admin_browser.py": (
        "workers beside a live server: quiet from the admin seen in the process's log, one "
        "at the production timings, workers reading a SQLite file the admin writes (Chromium)"
    ),
    "controls/test_controls_limits.py": f"two processes share a limiter; {KILL} holding leases",
    "controls/test_controls_timeouts.py": "a job stuck in a C call, abandoned by its process",
    "core/test_testrun.py": "a development worker beside a test run (separate processes)",
    "djtasks/test_tasks_faults.py": f"{KILL} mid-run; TERM; Redis stopped under one",
    "durable/test_durable_worker.py": "web processes and relays SIGKILLed",
    # Apart from the kills so that the two run side by side: minutes of waits each.
    "durable/test_durable_stall.py": "a relay process SIGSTOPped and resumed",
    "observe/test_metrics_worker.py": "--metrics-port and --processes",
    "periodic/test_periodic_database.py": (
        "workers reading the database from processes; the database lost under them"
    ),
    "periodic/test_periodic_fleet.py": f"a fleet of processes; {KILL}",
    "periodic/test_periodic_fleet_faults.py": (
        f"{KILL} and SIGSTOPped; a ticker and a runner of different settings"
    ),
    "periodic/test_periodic_restart.py": "TERM and TSTP at the production timings",
    "store/test_store_workers.py": (
        f"the command's boot line and exit on a cluster; {KILL}; a cluster node killed and "
        "a Sentinel failover under worker processes"
    ),
    "worker/test_async_controls.py": "a coroutine stuck in the loop, abandoned by its process",
    "worker/test_async_loop.py": (
        "the test app's asyncio client binds to a process's one loop; a process's threads "
        "and event loop filled at once, timed against each other"
    ),
    "worker/test_code_changes.py": "code changed under a process; --reload",
    "worker/test_faults_keyguard.py": "one process outlives every corruption of the module",
    "worker/test_faults_outage.py": (
        f"SIGSTOP; Redis killed, paused and restarted under worker processes; {KILL} at random"
    ),
    "worker/test_health.py": "cogworker_status and /healthz of a SIGSTOPped process",
    "worker/test_killed_mid_run.py": (
        f"{KILL} mid-run (seen missing, a fetch reply held, unique locks, on_dead); SIGSTOP; TERM"
    ),
    "worker/test_lifeline.py": "SIGKILL of workers; Redis restarted under them",
    "worker/test_lifeline_stalls.py": "SIGSTOP, SIGCONT and CPU starvation of worker processes",
    "worker/test_lifeline_redis.py": "Redis paused and restarted under worker processes",
    "worker/test_pickup.py": (
        "latency from a push to a start in an idle worker process (the test's own threads "
        "would share its interpreter lock), and a private Redis's commands from one process"
    ),
    "worker/test_recovery_stalls.py": "SIGSTOPped processes",
    "worker/test_recycle.py": "--max-jobs/--max-memory exits, RSS, --processes",
    "worker/test_reliable_recovery.py": f"{KILL}; --processes",
    "worker/test_reliable_shutdown.py": (
        f"TERM and SIGKILL during the hand-over; a job that never ends dies with its process "
        f"at TERM; {KILL} with coroutines running"
    ),
    "worker/test_worker_command.py": (
        "the command's argument parsing, exit codes and output: the checks' errors, the "
        "LOGGING recipe, the start line of a process without hiredis, job modules of other "
        "apps (a second settings), the wait for Redis and TERM while it waits"
    ),
    "worker/test_worker_signals.py": (
        "TERM, INT, TSTP, TTIN (the threads it lists); --processes; the admin's stop ends "
        "the process"
    ),
}


def _called(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return ""


def _says_cogworker(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and n.value == "cogworker" for n in ast.walk(node))


def starts_process(tree: ast.Module) -> bool:
    """True when the module starts ``manage.py cogworker``: through the ``worker`` fixture
    (a parameter of a test or fixture, or ``getfixturevalue``), a ``Worker``/
    ``start_workers`` call, or ``run_command``/``subprocess`` given a "cogworker" argument
    (``run_command(prefix, "cogworker")``, ``Popen([..., "cogworker"])``), or a name bound
    to one and starred in the call (``run_command(prefix, *args)`` with the arguments in a
    list). A "cogworker" elsewhere (a prefix, a message) starts nothing."""
    lists = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and _says_cogworker(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
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
            if name in {"run_command", "run", "Popen", "check_output"}:
                given = [*node.args, *(k.value for k in node.keywords)]
                if any(_says_cogworker(a) for a in given if not isinstance(a, ast.Starred)):
                    return True
                if any(
                    isinstance(a, ast.Starred)
                    and isinstance(a.value, ast.Name)
                    and a.value.id in lists
                    for a in given
                ):
                    return True
    return False


def process_files() -> list[str]:
    """The test files that start a worker process, relative to tests/."""
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if "django_tasks" in path.parts:  # django-tasks' own suite, vendored: no worker
            continue
        if starts_process(ast.parse(path.read_text(), str(path))):
            found.append(str(path.relative_to(TESTS)))
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
    assert not scan(
        "P = ('cogworker', 'app')\ndef test_a(prefix):\n    run_command(prefix, 'check')"
    )


def test_each_process_file_says_why_and_they_are_few():
    found = process_files()
    unexplained = sorted(set(found) - set(REASONS))
    assert not unexplained, (
        f"these test files start manage.py cogworker: move what needs no process to the "
        f"in-process worker (the inworker fixture), or say in REASONS what does: {unexplained}"
    )
    gone = sorted(set(REASONS) - set(found))
    assert not gone, f"these no longer start a worker process: drop them from REASONS: {gone}"
    assert len(found) <= MAX_PROCESS_FILES, (len(found), MAX_PROCESS_FILES)
