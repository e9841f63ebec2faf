"""The run layer's locks are few. (The threads of a worker process are the ones
docs/workers.md's table lists: asked with TTIN of a real process in
tests/worker/test_worker_signals.py.)"""

from __future__ import annotations

import re

from ..helpers import ROOT


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
