"""Periodic entries through real faults: Redis stopped across ticks, a ``last_slot`` key
of the wrong type. A private redis-server whose data survives a kill (AOF, fsync
always). The workers run in this process. (Redis stopped as an ``until_executed`` run
finishes, between worker processes of different settings, is in
tests/periodic/test_periodic_fleet_faults.py.)"""

from __future__ import annotations

import time

from ..helpers import wait_until
from .test_periodic_fleet import slots, spans

DURABLE = ["--appendonly", "yes", "--appendfsync", "always"]


def sleep_until(epoch: float) -> None:
    time.sleep(max(0.0, epoch - time.time()))


def test_redis_stopped_across_ticks_the_due_slot_fires_once_after(redis_server, inworker, prefix):
    server = redis_server(extra=DURABLE)
    c = server.client()
    periodic = {"every-3s": {"cron": "*/3 * * * * *", "job": "testapp.jobs.periodic_tick"}}
    for _ in range(2):
        inworker(periodic=periodic, settings={"REDIS_URL": server.url})
    first = min(wait_until(lambda: slots(c, prefix), 10, message="a first slot"))
    due = first + 3
    while due - time.time() < 1.0:
        due += 3
    sleep_until(due - 0.6)
    server.stop()  # down across the slot and several ticks (PERIODIC_TICK 0.25 s)
    sleep_until(due + 0.9)
    stopped_until = time.time()
    server.start()
    c = server.client()
    wait_until(lambda: due in slots(c, prefix), 10, message=f"slot {due} after the restart")
    sleep_until(due + 2.5)  # before the next slot
    counts = slots(c, prefix)
    assert counts[due] == 1
    assert all(n == 1 for n in counts.values()), counts
    # Pushed once Redis was back, not before the outage (when it was not yet due).
    pushed = float(c.hget(f"{prefix}:test:slots:pushed", str(due)))
    assert pushed >= stopped_until, (pushed, stopped_until, due)


def test_a_last_slot_of_the_wrong_type_backs_that_entry_off_only(inworker, worker_log, r, prefix):
    periodic = {
        "bad": {"cron": "* * * * * *", "job": "testapp.jobs.periodic_tick", "queue": "default"},
        "good": {"cron": "* * * * * *", "job": "testapp.jobs.periodic_span"},
    }
    r.rpush(f"{prefix}:periodic:last_slot:bad", "not a string")
    inworker(periodic=periodic)
    time.sleep(3)
    log = worker_log.log()
    # Logged once and backed off (5 s), not retried on every tick (0.25 s).
    assert log.count("Periodic tick: bad (next try in 5s) failed") == 1, log[-3000:]
    assert "WRONGTYPE" in log
    assert len(spans(r, prefix)) >= 2  # the other entry kept firing
