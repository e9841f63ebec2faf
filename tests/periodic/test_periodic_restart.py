"""No slot lost to a restart, with real workers at the production timings
(``PERIODIC_TICK`` 5 s, ``SHUTDOWN_TIMEOUT`` 25 s, beats every 5 s, ...): a worker TERMed
while it drains a running job fires the slot that comes due meanwhile (rule 16), and so
does a quiet one; a slot that passed during a 20 s gap with no worker fires once at the
next start (``PERIODIC_GRACE``); one that passed 10 minutes before the start is skipped
and said once per worker (``PERIODIC_CATCH_UP`` on fires it). Slots are read from the
pushed jobs' payloads."""

from __future__ import annotations

import json
import math
import signal
import time

from cogworker_django.conf import DEFAULTS
from cogworker_django.store import keys

from ..helpers import FAST_SETTINGS, wait_until

# Every timing the suite shortens, back at its production value.
PRODUCTION = {k: DEFAULTS[k] for k in FAST_SETTINGS if k != "RETRY_BACKOFF"}
TICK = "testapp.jobs.periodic_tick"


def queued_slots(r, name: str) -> list[int]:
    """The slots of ``name`` waiting in the default queue (their payloads)."""
    jobs = [json.loads(x) for x in r.lrange(keys.queue("default"), 0, -1)]
    return sorted(j["periodic_slot"] for j in jobs if j.get("periodic") == name)


def ran(r, prefix) -> dict[int, int]:
    return {int(k): int(v) for k, v in r.hgetall(f"{prefix}:test:slots").items() if k.isdigit()}


def once_a_minute_at(epoch: int) -> str:
    """A 6-field cron line whose slots are ``epoch`` and every minute from it."""
    return f"{epoch % 60} * * * * *"


def test_a_worker_termed_while_draining_fires_the_slot_due_meanwhile(worker, r, prefix):
    assert PRODUCTION["PERIODIC_TICK"] == 5.0 and PRODUCTION["SHUTDOWN_TIMEOUT"] == 25
    entry = {"every-15s": {"cron": "*/15 * * * * *", "job": TICK}}
    w = worker(settings=PRODUCTION, periodic=entry)
    # Its ticker runs (the first tick waits for the first orphan pass): a slot fired.
    wait_until(lambda: ran(r, prefix), 60, 0.2, message="a first slot run")
    # Right after a slot, a job that runs for 24 s starts; then TERM: the drain lasts
    # until the job ends, across the next slot (15 s later).
    before = max(ran(r, prefix))
    wait_until(lambda: max(ran(r, prefix)) > before, 30, 0.1, message="the next slot run")
    last = max(ran(r, prefix))
    w_job = {"func": "testapp.jobs.tracked", "args": [24, "long"]}
    from cogworker_django.core import payload

    r.lpush(keys.queue("default"), payload.encode(payload.build(w_job["func"], w_job["args"])))
    wait_until(lambda: r.hget(f"{prefix}:test:runs", "long:start"), 10, message="the long job")
    termed = time.time()
    # (A slot is fired by the first tick at or after it: up to PERIODIC_TICK, 5 s, late.
    # TERM 5 s before the next slot still leaves the 24 s drain across it.)
    assert termed < last + 10, "TERM well before the next slot"
    w.signal(signal.SIGTERM)
    assert w.wait(60) == 0
    # The slot that came due while it drained was pushed by it (nobody else ran), before
    # it exited: its job waits in the queue for the next worker.
    assert queued_slots(r, "every-15s") == [last + 15]
    assert r.hget(f"{prefix}:test:runs", "long:end") == "1"  # it did drain the job


def test_a_quiet_worker_keeps_firing(worker, r, prefix):
    entry = {"every-second": {"cron": "* * * * * *", "job": TICK}}
    w = worker(periodic=entry)
    wait_until(lambda: ran(r, prefix), 30, message="a first run")
    w.signal(signal.SIGTSTP)
    w.wait_for_log("quiet: no new jobs will be fetched")
    quieted = time.time()
    # Quiet: it runs nothing more, and its ticker still pushes every slot.
    wait_until(
        lambda: len([s for s in queued_slots(r, "every-second") if s > quieted]) >= 4,
        15,
        message="slots pushed while quiet",
    )
    slots = [s for s in queued_slots(r, "every-second") if s > quieted]
    assert slots == list(range(slots[0], slots[-1] + 1))


def test_a_slot_that_passed_during_a_20s_gap_fires_once_at_the_next_start(worker, r, prefix):
    slot = math.ceil(time.time()) + 20
    entry = {"gap": {"cron": once_a_minute_at(slot), "job": TICK}}
    a = worker(settings=PRODUCTION, periodic=entry)
    wait_until(lambda: time.time() >= slot - 10, 30, 0.1, message="10 s before the slot")
    assert a.stop(60) == 0  # nothing running: it exits at once, before the slot
    stopped = time.time()
    assert stopped < slot
    wait_until(lambda: time.time() >= slot + 10, 30, 0.1, message="10 s after the slot")
    assert ran(r, prefix).get(slot) is None
    # Two workers start 20 s after the first stopped: the slot fires, once.
    b = worker(settings=PRODUCTION, periodic=entry, wait=False)
    c = worker(settings=PRODUCTION, periodic=entry, wait=False)
    for w in (b, c):
        w.wait_for_log(r"cogworker \S+ started", timeout=30)
        w.wait_for_log(r"less than 300s late \(PERIODIC_GRACE\)")
    wait_until(lambda: ran(r, prefix).get(slot), 60, 0.2, message=f"slot {slot} run")
    time.sleep(2)
    assert ran(r, prefix)[slot] == 1
    assert "was missed" not in b.log() + c.log()


def _ten_minutes_ago() -> tuple[int, str]:
    slot = math.floor(time.time()) - 600
    t = time.gmtime(slot)
    return slot, f"{t.tm_sec} {t.tm_min} {t.tm_hour} * * *"  # once a day (UTC)


def test_a_slot_that_passed_10_minutes_before_the_start_is_skipped_and_said_once(worker, r, prefix):
    slot, cron = _ten_minutes_ago()
    entry = {"daily": {"cron": cron, "job": TICK, "timezone": "UTC"}}
    # Yesterday's run happened (a worker ran then); today's came during a 10-minute gap.
    r.set(keys.periodic_last_slot("daily"), slot - 86400)
    workers = [worker(periodic=entry, wait=False) for _ in range(2)]
    for w in workers:
        w.wait_for_log(r"cogworker \S+ started", timeout=30)
        w.wait_for_log(r"periodic daily: slot \S+ was missed", timeout=30)
    time.sleep(3)  # a dozen ticks more (0.25 s each): still said once
    for w in workers:
        assert len(w.log().split("periodic daily: slot")) == 2, w.log()[-2000:]
        assert "PERIODIC_GRACE (300s)" in w.log()
    assert ran(r, prefix) == {}
    assert r.get(keys.periodic_last_slot("daily")) == str(slot - 86400)


def test_catch_up_on_fires_a_slot_that_passed_10_minutes_before_the_start(worker, r, prefix):
    slot, cron = _ten_minutes_ago()
    entry = {"daily": {"cron": cron, "job": TICK, "timezone": "UTC"}}
    r.set(keys.periodic_last_slot("daily"), slot - 86400)
    for _ in range(2):
        worker(periodic=entry, settings={"PERIODIC_CATCH_UP": True}, wait=False)
    wait_until(lambda: ran(r, prefix).get(slot), 30, message="the missed slot")
    time.sleep(2)
    assert ran(r, prefix) == {slot: 1}
