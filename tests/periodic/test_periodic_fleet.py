"""The periodic guarantee with real worker processes on the main Redis: every slot
enqueued exactly once across a fleet, ``until_executed`` runs never overlap (and a run
whose worker is killed frees its entry within the active TTL), disable / enable."""

from __future__ import annotations

import time

import pytest
from django.test import override_settings

from cogworker_django.api import periodic as control
from cogworker_django.store import keys

from ..helpers import wait_until

# Periodic once-per-fleet behaves the same on a Redis Cluster, with one hash tag and with
# a home per queue: every test runs on all three (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]

EVERY_SECOND = {"every-second": {"cron": "* * * * * *", "job": "testapp.jobs.periodic_tick"}}


def slots(r, prefix) -> dict[int, int]:
    """Runs per slot (``testapp.jobs.periodic_*`` count them)."""
    return {int(k): int(v) for k, v in r.hgetall(f"{prefix}:test:slots").items()}


def spans(r, prefix) -> list[dict]:
    """Runs of testapp.jobs.periodic_span, one per start line (a job run twice is two
    runs of one jid): jid, slot, pid, start and (if written) end."""
    runs: list[dict] = []
    latest: dict[str, dict] = {}
    for line in r.lrange(f"{prefix}:test:spans", 0, -1):
        kind, jid, *rest = line.split()
        if kind == "start":
            run = {"jid": jid, "slot": int(rest[0]), "pid": int(rest[1]), "start": float(rest[2])}
            runs.append(run)
            latest[jid] = run
        else:
            latest[jid]["end"] = float(rest[0])
    return sorted(runs, key=lambda run: run["start"])


def test_three_processes_fire_every_slot_exactly_once(worker, r, prefix):
    workers = [worker(periodic=EVERY_SECOND, wait=False) for _ in range(3)]
    for w in workers:
        w.wait_for_log(r"cogworker \S+ started", timeout=30)
    start = time.time()
    # Ten slots after the start have run (however long a busy machine takes for them).
    wait_until(lambda: max(slots(r, prefix), default=0) >= int(start) + 11, 30, message="ten slots")
    end = time.time()
    time.sleep(0.5)  # a duplicate of the last slots, if any, would be counted by now
    counts = slots(r, prefix)
    assert {s: c for s, c in counts.items() if c != 1} == {}
    window = range(int(start) + 1, int(end))
    assert [s for s in window if s not in counts] == [], "slots that never fired"
    assert len(window) >= 10


def test_until_executed_runs_never_overlap(worker, r, prefix):
    periodic = {
        "exclusive": {
            "cron": "* * * * * *",
            "job": "testapp.jobs.periodic_span",
            "args": [1.5],
            "unique": "until_executed",
        }
    }
    worker(periodic=periodic, wait=False)
    worker(periodic=periodic)
    runs = wait_until(lambda: spans(r, prefix)[2:] and spans(r, prefix), 15, message="3 runs")
    for earlier, later in zip(runs, runs[1:], strict=False):
        assert "end" in earlier and later["start"] >= earlier["end"], f"{later} overlaps {earlier}"
    # Slots that came while a run held the lock (past the grace) were skipped, not queued.
    assert runs[2]["slot"] - runs[0]["slot"] > 2
    assert all(count == 1 for count in slots(r, prefix).values())


def test_a_killed_run_frees_its_entry_once_the_active_ttl_lapses(worker, r, prefix):
    periodic = {
        "exclusive": {
            "cron": "* * * * * *",
            "job": "testapp.jobs.periodic_span",
            "args": [30],
            "unique": "until_executed",
        }
    }
    settings = {"PERIODIC_ACTIVE_TTL": 2}
    workers = [worker(periodic=periodic, settings=settings, wait=False) for _ in range(2)]
    for w in workers:
        w.wait_for_log(r"cogworker \S+ started", timeout=30)
    running = keys.periodic_running("exclusive")
    (first,) = wait_until(lambda: spans(r, prefix), 15, message="the first run")
    # The first run holds the entry: its worker's heartbeat refreshes the lock to the
    # active TTL (seen as the TTL rising again after it ran down).
    assert r.get(running) == first["jid"]
    ttls = [r.pttl(running)]

    def refreshed() -> bool:
        ttls.append(r.pttl(running))
        return ttls[-1] > min(ttls) + 200

    wait_until(refreshed, 5, message="the lock refreshed")
    victim = next(w for w in workers if w.pid == first["pid"])
    victim.kill()
    killed_at = time.time()
    slot_at_kill = int(killed_at)
    runs = wait_until(lambda: spans(r, prefix)[1:], 10, message="a new run after the kill")
    second = runs[0]
    # A fresh slot's run, on the surviving worker, holding the entry now (not the killed
    # run's job recovered and re-run).
    assert second["jid"] != first["jid"], (first, second)
    assert second["slot"] > slot_at_kill, (first, second)
    assert r.get(running) == second["jid"]
    # Not before the lock, no longer refreshed, lapsed (active TTL 2 s, last refreshed
    # at most a beat, 0.5 s, before the kill).
    assert second["start"] - killed_at >= 1.0


def test_disable_wait_two_slots_enable_no_burst(worker, r, prefix):
    worker(periodic=EVERY_SECOND)
    wait_until(lambda: len(slots(r, prefix)) >= 2, 10, message="two runs")
    with override_settings(COGWORKER_PERIODIC=EVERY_SECOND):
        control.disable("every-second")
        disabled_at = time.time()
        time.sleep(2.2)  # two slots pass while it is disabled: neither may fire
        assert [s for s in slots(r, prefix) if s > disabled_at] == []
        control.enable("every-second")
        enabled_at = time.time()
    # Firing again: two slots after the enable (however long a busy machine takes).
    wait_until(
        lambda: len([s for s in slots(r, prefix) if s >= enabled_at]) >= 2, 15, message="two runs"
    )
    counts = slots(r, prefix)
    assert all(c == 1 for c in counts.values())
    # No burst: the slots passed while disabled never fire; after the enable every slot
    # fires, none skipped.
    assert [s for s in counts if disabled_at < s < enabled_at - 1] == []
    fired = sorted(s for s in counts if s > enabled_at)
    assert fired == list(range(fired[0], fired[-1] + 1)), fired
