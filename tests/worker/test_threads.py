"""The threads of a worker process are the ones docs/workers.md's table lists: a real
``manage.py cogworker -c 10`` at the default settings, asked with TTIN."""

from __future__ import annotations

import re
import signal

from ..helpers import ROOT

DOC = ROOT / "docs" / "workers.md"


def documented() -> dict[str, str]:
    """Thread name (its pattern, ``N`` and ``<...>`` as placeholders) -> when it runs."""
    lines = DOC.read_text().splitlines()
    start = lines.index("| thread | runs | does |") + 2
    rows = {}
    for line in lines[start:]:
        m = re.match(r"^\| `([^`]+)` \| ([^|]+) \|", line)
        if not m:
            break
        rows[m.group(1)] = m.group(2).strip()
    return rows


def pattern(name: str) -> re.Pattern[str]:
    body = re.escape(name).replace("N", r"\d+")
    body = re.sub(r"<[^>]+>", ".+", body.replace(r"\<", "<").replace(r"\>", ">"))
    return re.compile(f"^{body}$")


def test_the_threads_are_the_documented_ones_and_no_more(worker):
    rows = documented()
    assert "processor-N" in rows and "chores" in rows, rows
    # The test project registers async jobs (an event loop) and limiters (their waker, a
    # chore): the defaults otherwise, at -c 10.
    w = worker(args=["-c", "10"], settings={"CONCURRENCY": 10})
    w.signal(signal.SIGTTIN)
    w.wait_for_log(r"thread MainThread \(", 15)
    listed = re.findall(r"thread (\S+) \(\d+\):", w.log())
    unknown = [n for n in listed if not any(pattern(p).match(n) for p in rows)]
    assert unknown == [], (unknown, listed)
    # Every row but those on demand and the metrics server's (no --metrics-port here).
    always = [p for p, when in rows.items() if not when.startswith(("on demand", "with `--"))]
    for name in always:
        assert any(pattern(name).match(n) for n in listed), (name, listed)
    on_demand = [p for p, when in rows.items() if when.startswith("on demand")]
    permanent = [n for n in listed if not any(pattern(p).match(n) for p in on_demand)]
    assert len(permanent) == 10 + 6, permanent  # CONCURRENCY + 6 (docs/workers.md)
    assert w.stop() == 0


def test_the_run_layer_has_four_locks():
    """Every lock made in worker/ (a Condition on a lock already there is that lock's):
    the ledger's (every state change of a fetched job), the dispatcher's (its
    scheduling), the heartbeat's clearance (read by the chores' orphan passes) and the
    key guard's stamp (the admin's process may quarantine too). What else crosses
    threads goes through a queue (the chores' and the watchdog's wake-ups) or is one
    thread's own."""
    made = []
    for path in sorted((ROOT / "cogworker_django" / "worker").glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"threading\.(Lock|RLock)\(|threading\.Condition\(\)", line):
                made.append(f"{path.name}:{n}")
    assert len(made) <= 4, made
