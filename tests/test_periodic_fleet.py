"""The periodic guarantee across a fleet of real worker processes: every slot is
enqueued exactly once, and ``until_executed`` runs never overlap."""

from __future__ import annotations

import time

from .helpers import wait_until

TICK_ENTRY = {"every-second": {"cron": "* * * * * *", "job": "testapp.jobs.periodic_tick"}}


def _slots(r, prefix) -> dict[int, int]:
    return {int(k): int(v) for k, v in r.hgetall(f"{prefix}:test:slots").items()}


def test_three_processes_fire_every_slot_exactly_once(worker, r, prefix):
    workers = [worker(periodic=TICK_ENTRY, wait=False) for _ in range(3)]
    for w in workers:
        w.wait_for_log(r"cogworker \S+ started", timeout=30)
    start = time.time()
    time.sleep(12)
    end = time.time()
    # Let the last slots of the window run.
    wait_until(lambda: max(_slots(r, prefix), default=0) >= int(end), 5, message="last slot")
    slots = _slots(r, prefix)
    window = range(int(start) + 1, int(end))
    assert all(count == 1 for count in slots.values()), {s: c for s, c in slots.items() if c != 1}
    missing = [s for s in window if s not in slots]
    assert not missing, f"slots never fired: {missing}"
    assert len(window) >= 10
