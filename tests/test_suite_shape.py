"""The suite's shape: which test files start a worker process (``manage.py cogworker``).

A real process costs seconds of boot and belongs to tests about what only a process has:
signals, exit codes, the command's output and argument parsing, forks (``--processes``),
SIGKILL/SIGSTOP, RSS, threads as TTIN reports them, a fresh interpreter. Everything else
runs on the in-process worker (the ``inworker`` fixture, cogworker_django/worker/
inprocess.py). So every file that starts one is listed below with what needs the process,
a new one fails until it is given its reason, and their number may only go down.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# At most this many (issue 48 aims at 30; lower it as files move to the in-process worker).
MAX_PROCESS_FILES = 51

# Helpers that start ``manage.py cogworker`` (tests/helpers.py, tests/periodic/db_support.py).
STARTERS = {"Worker", "start_workers"}
# The conftest fixture that starts one.
FIXTURE = "worker"

KILL = "workers SIGKILLed"
# Each test file that starts a worker process -> what needs the process.
REASONS = {
    "admin/test_admin_browser.py": "quiet from the admin seen in the process's log (Chromium)",
    "admin/test_admin_browser_live.py": "a worker beside a live server (Chromium)",
    "admin/test_admin_browser_periodic.py": "workers reading a SQLite file the admin writes",
    "admin/test_admin_browser_polish.py": "a worker at the production timings (Chromium)",
    "api/test_api_processes.py": f"the admin's stop ends the process; {KILL}",
    "controls/test_controls_limits.py": f"two processes share a limiter; {KILL} holding leases",
    "controls/test_controls_timeouts.py": "a job stuck in a C call, abandoned by its process",
    "core/test_job_modules.py": "the command's start in a project with other apps",
    "core/test_retry_control.py": f"{KILL} while filing on_dead",
    "core/test_testrun.py": "a development worker beside a test run (separate processes)",
    "core/test_unique_dead.py": f"{KILL} and SIGSTOPped mid-run; TERM",
    "djtasks/test_tasks_faults.py": f"{KILL} mid-run",
    "durable/test_durable_stall.py": "a relay process SIGSTOPped and resumed",
    "durable/test_durable_worker.py": "web processes and relays SIGKILLed",
    "observe/test_logs.py": "the LOGGING recipe as the command's output",
    "observe/test_metrics_worker.py": "--metrics-port and --processes",
    "periodic/test_periodic_database.py": "workers reading the database from processes",
    "periodic/test_periodic_database_outage.py": "the database lost under worker processes",
    "periodic/test_periodic_fleet.py": f"a fleet of processes; {KILL}",
    "periodic/test_periodic_faults.py": "a ticker and a runner of different settings",
    "periodic/test_periodic_fleet_faults.py": f"{KILL} and SIGSTOPped",
    "periodic/test_periodic_restart.py": "TERM and TSTP at the production timings",
    "store/test_cluster.py": f"the command's boot line and exit on a cluster; {KILL}",
    "store/test_cluster_failover.py": "a cluster node killed under a worker process",
    "store/test_sentinel.py": "a worker and a producer process through a failover",
    "test_checks.py": "the command's exit code and output",
    "worker/test_async_controls.py": "a coroutine stuck in the loop, abandoned by its process",
    "worker/test_async_loop.py": "the test app's asyncio client binds to a process's one loop",
    "worker/test_lifeline.py": "SIGKILL, SIGSTOP and SIGCONT of workers; Redis restarted under them",
    "worker/test_pickup.py": (
        "latency from a push to a start in an idle worker process (the test's own threads "
        "would share its interpreter lock), and a private Redis's commands from one process"
    ),
    "worker/test_side_by_side.py": (
        "a process's threads and event loop filled at once, timed against each other"
    ),
    "worker/test_async_shutdown.py": f"{KILL} with coroutines running; TERM",
    "worker/test_code_changes.py": "code changed under a process; --reload",
    "worker/test_faults_keyguard.py": "one process outlives every corruption of the module",
    "worker/test_faults_outage.py": "SIGSTOP; Redis killed under worker processes",
    "worker/test_health.py": "cogworker_status and /healthz of a SIGSTOPped process",
    "worker/test_own_fetch_faults.py": f"{KILL} while a fetch reply is held",
    "worker/test_recovery_missing.py": f"{KILL}: a process seen missing",
    "worker/test_recovery_stalls.py": "SIGSTOPped processes",
    "worker/test_recycle.py": "--max-jobs/--max-memory exits, RSS, --processes",
    "worker/test_reliable_outage.py": "Redis SIGKILLed under worker processes",
    "worker/test_reliable_recovery.py": f"{KILL}; --processes",
    "worker/test_reliable_shutdown.py": "TERM and SIGKILL during the hand-over",
    "worker/test_reply_parser.py": "the start line; a process without hiredis",
    "worker/test_shutdown_interrupts.py": "a job that never ends dies with its process at TERM",
    "worker/test_smoke_worker.py": "TERM",
    "worker/test_threads.py": "threads as TTIN reports them",
    "worker/test_wait_for_redis.py": "the command waiting for Redis; TERM while it waits",
    "worker/test_worker_command.py": "the command's argument parsing, exit codes and output",
    "worker/test_worker_signals.py": "TERM, INT, TSTP, TTIN; --processes",
    "workflows/test_workflows_chaos.py": f"{KILL} at random",
}


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
