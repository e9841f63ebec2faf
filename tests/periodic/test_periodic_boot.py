"""A periodic slot that comes due while a worker boots fires, at the production timings.

The first tick waits for the first orphan pass (the first beat, then the poller's
pass: from a second to tens of seconds after the launch, with the machine's load), so
a slot due a few seconds after the worker was launched may be in the past
at that tick. With catch-up off it must still fire: it came due after the process
started. (A first tick before it comes finds the previous minute's slot, which passed
less than PERIODIC_GRACE before the start while no worker ran: it fires too, once.)
"""

from __future__ import annotations

import math
import time

from cogworker_django.conf import DEFAULTS

from ..helpers import FAST_SETTINGS, wait_until

# Every timing the suite shortens, back at its production value.
PRODUCTION_TIMINGS = {k: DEFAULTS[k] for k in FAST_SETTINGS if k not in ("RETRY_BACKOFF",)}


def slots(r, prefix) -> dict[int, int]:
    return {int(k): int(v) for k, v in r.hgetall(f"{prefix}:test:slots").items()}


def test_a_slot_due_during_boot_fires_once_at_the_production_timings(
    inworker, worker_log, r, prefix
):
    assert PRODUCTION_TIMINGS["PERIODIC_TICK"] == 5.0 and PRODUCTION_TIMINGS["HEARTBEAT_INTERVAL"]
    launched = time.time()
    slot = math.ceil(launched) + 3  # once a minute, 3 s after the launch
    entry = {"boot": {"cron": f"{slot % 60} * * * * *", "job": "testapp.jobs.periodic_tick"}}
    inworker(settings={**PRODUCTION_TIMINGS, "PERIODIC_CATCH_UP": False}, periodic=entry)
    wait_until(lambda: slot in slots(r, prefix), 50, 0.2, message=f"slot {slot} run")
    time.sleep(1)
    assert slots(r, prefix) in ({slot: 1}, {slot - 60: 1, slot: 1})
    assert "was missed" not in worker_log.log()
