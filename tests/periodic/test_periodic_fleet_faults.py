"""Each periodic slot once per fleet, under real faults: three worker processes ticking
an every-second entry while one is SIGKILLed between claiming a slot and pushing its
run (testapp.faults.KillOnPeriodicPush), one is SIGSTOPped across slots, and Redis is
paused (CLIENT PAUSE, a private redis-server). Pushes are counted by jid: a run
recovered from a killed worker is the same push run again, a second jid for one slot is
a second push. The killed claimer's slot is pushed by orphan recovery from its claim
record (periodic/claims.py), under the jid the claim was made for.

And Redis stopped as an ``until_executed`` run finishes: its release is deferred, and
the next slot still fires within the grace (a ticking and a running worker process of
different settings, a private redis-server whose data survives a kill)."""

from __future__ import annotations

import re
import signal
import time
from collections import defaultdict

from ..helpers import wait_until
from .test_periodic_faults import DURABLE, sleep_until
from .test_periodic_fleet import spans

KILLER = {"MIDDLEWARE": {"client": ["testapp.faults.KillOnPeriodicPush"], "server": []}}
EVERY_SECOND = {
    "every-second": {"cron": "* * * * * *", "job": "testapp.jobs.periodic_span", "args": [0]}
}


def pushes(c, prefix) -> dict[int, set[str]]:
    """Slot -> the jids pushed for it (each seen running at least once)."""
    by_slot: dict[int, set[str]] = defaultdict(set)
    for run in spans(c, prefix):
        by_slot[run["slot"]].add(run["jid"])
    return dict(by_slot)


def killed(c, prefix) -> list[tuple[int, int]]:
    return [tuple(map(int, x.split())) for x in c.lrange(f"{prefix}:test:killed_slots", 0, -1)]


def _fired_past(c, prefix, slot: int) -> bool:
    return max(pushes(c, prefix), default=0) >= slot


def test_every_slot_pushed_once_through_a_kill_a_stop_and_a_pause(
    worker, redis_server, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    c = server.client()

    def start(wait: bool = True):
        return worker(redis_url=server.url, periodic=EVERY_SECOND, settings=KILLER, wait=wait)

    workers = [start(wait=False) for _ in range(3)]
    for w in workers:
        w.wait_for_log(r"cogworker \S+ started", timeout=30)
    first = min(wait_until(lambda: pushes(c, prefix), 15, message="a first slot"))

    # 1. A worker killed between the claim and the push of a slot.
    c.set(f"{prefix}:test:kill_on_periodic_push", 1)
    ((killed_slot, killed_pid),) = wait_until(lambda: killed(c, prefix), 10, message="a kill")
    (victim,) = [w for w in workers if w.pid == killed_pid]
    assert victim.proc.wait(10) == -signal.SIGKILL
    claimed_as = c.get(f"{prefix}:periodic:lock:every-second:{killed_slot}")
    assert claimed_as and killed_slot not in pushes(c, prefix)  # claimed, never pushed
    workers = [w for w in workers if w is not victim] + [start()]
    wait_until(lambda: _fired_past(c, prefix, killed_slot + 2), 10, message="slots after it")

    # 2. A worker stopped across slots (shorter than ORPHAN_THRESHOLD: not taken for dead).
    stopped = workers[0]
    stopped.signal(signal.SIGSTOP)
    try:
        now = int(time.time())
        wait_until(lambda: _fired_past(c, prefix, now + 2), 10, message="slots while stopped")
    finally:
        stopped.signal(signal.SIGCONT)

    # 3. Redis paused for 2 s: every process's tick waits; only the latest slot fires.
    paused_at = time.time()
    c.execute_command("CLIENT", "PAUSE", 2000, "ALL")
    resumed_at = paused_at + 2.0
    wait_until(lambda: _fired_past(c, prefix, int(resumed_at) + 4), 20, message="after pause")
    last = int(resumed_at) + 4
    time.sleep(0.5)  # a second push of the last slots, if any, would have run by now

    # The killed process's claim stands (the others found the slot taken) and orphan
    # recovery pushes its job once the process has missed ORPHAN_THRESHOLD: late, not
    # lost, and under the claim's own jid.
    wait_until(lambda: killed_slot in pushes(c, prefix), 30, message="the killed claim's job")
    seen = pushes(c, prefix)
    assert {s: j for s, j in seen.items() if len(j) != 1} == {}, "slots pushed twice"
    assert killed(c, prefix) == [(killed_slot, killed_pid)]
    assert seen[killed_slot] == {claimed_as}
    assert killed_slot + 1 in seen
    assert any("had claimed but not pushed" in w.log() for w in workers)
    (dead,) = re.findall(r"identity=(\S+)", victim.log())[:1]
    assert c.hlen(f"{prefix}:periodic:claims:{dead}") == 0, "a claim record left behind"
    wait_until(  # forgotten on the first recovery pass that finds nothing left of it
        lambda: (
            dead not in c.smembers(f"{prefix}:periodic:claimers")
            and dead not in c.smembers(f"{prefix}:inprogress_ids")
        ),
        10,
        message="the dead claimer forgotten",
    )
    in_pause = set(range(int(paused_at), int(resumed_at) + 2))
    missing = [s for s in range(first, last + 1) if s not in seen]
    assert [s for s in missing if s not in in_pause] == [], (missing, paused_at)
    for w in workers:
        assert w.proc.poll() is None, w.log()[-3000:]
        assert "Traceback" not in w.log(), w.log()[-3000:]


def test_an_until_executed_entry_runs_the_killed_claims_job_then_fires_again(
    worker, redis_server, configure, prefix
):
    """The claim takes the entry's running lock before the job exists, for the claim
    TTL only (PERIODIC_ACTIVE_TTL + 30 s, periodic/running_lock.py); the push confirms
    it for UNIQUE_LOCK_TTL. A process killed in between leaves the lock to a jid whose
    job exists only in its claim record: orphan recovery pushes that job (under that
    jid) once the process has missed ORPHAN_THRESHOLD, it runs holding the lock, and
    the entry fires again after it, long before the claim TTL would have lapsed."""
    server = redis_server()
    configure(REDIS_URL=server.url)
    c = server.client()
    periodic = {
        "exclusive": {
            "cron": "* * * * * *",
            "job": "testapp.jobs.periodic_span",
            "args": [0],
            "unique": "until_executed",
        }
    }
    settings = {**KILLER, "PERIODIC_ACTIVE_TTL": 1}
    claim_ttl = 1 + 30
    running = f"{prefix}:periodic:running:exclusive"
    workers = [
        worker(redis_url=server.url, periodic=periodic, settings=settings, wait=False)
        for _ in range(2)
    ]
    for w in workers:
        w.wait_for_log(r"cogworker \S+ started", timeout=30)
    wait_until(lambda: pushes(c, prefix), 15, message="a first slot")
    c.set(f"{prefix}:test:kill_on_periodic_push", 1)
    ((killed_slot, _pid),) = wait_until(lambda: killed(c, prefix), 10, message="a kill")
    killed_at = time.time()
    holder = c.get(running)
    assert holder and holder not in {j for js in pushes(c, prefix).values() for j in js}
    assert 0 < c.ttl(running) <= claim_ttl  # the claim TTL, not UNIQUE_LOCK_TTL
    recovered = wait_until(
        lambda: [r for r in spans(c, prefix) if r["slot"] == killed_slot],
        claim_ttl,
        message=f"the killed claim's run (lock {c.get(running)}, ttl {c.ttl(running)} s)",
    )[0]
    assert recovered["jid"] == holder
    assert recovered["start"] - killed_at < claim_ttl - 3  # not blocked for the claim TTL
    later = wait_until(
        lambda: [r for r in spans(c, prefix) if r["slot"] > killed_slot and "end" in r],
        15,
        message="a run after the recovered one",
    )[0]
    ended = wait_until(
        lambda: [r for r in spans(c, prefix) if r["jid"] == holder and "end" in r],
        10,
        message="the recovered run's end",
    )[0]
    assert later["start"] >= ended["end"]  # the two runs never overlap
    assert len({r["jid"] for r in spans(c, prefix) if r["slot"] == killed_slot}) == 1


def test_a_hanging_client_middleware_holds_up_only_the_recovered_claim(
    worker, redis_server, configure, prefix
):
    """Recovering a dead claimer's slot runs the client middleware (user code); one
    that hangs holds up that push on its own thread, never the poller that recovery
    runs on: scheduled jobs keep moving, and the slot is pushed once the hang ends."""
    from cogworker_django.core import payload

    server = redis_server()
    configure(REDIS_URL=server.url)
    c = server.client()
    hang = 12
    a = worker(redis_url=server.url, periodic=EVERY_SECOND, settings=KILLER)
    wait_until(lambda: pushes(c, prefix), 15, message="a first slot")
    c.set(f"{prefix}:test:kill_on_periodic_push", 1)
    ((killed_slot, _pid),) = wait_until(lambda: killed(c, prefix), 10, message="a kill")
    assert a.proc.wait(10) == -signal.SIGKILL
    claimed_as = c.get(f"{prefix}:periodic:lock:every-second:{killed_slot}")
    c.set(f"{prefix}:test:hang_periodic_push", hang)
    hanger = {"MIDDLEWARE": {"client": ["testapp.faults.HangOnPeriodicPush"], "server": []}}
    b = worker(redis_url=server.url, settings=hanger)  # no entries: only recovery pushes
    wait_until(lambda: c.lrange(f"{prefix}:test:hung_pushes", 0, -1), 30, message="a hang")
    hung_at = time.time()

    due = payload.build("testapp.jobs.record", ["while-hung"], queue="default")
    c.zadd(f"{prefix}:schedule", {payload.encode(due): time.time() - 1})
    wait_until(lambda: c.hget(f"{prefix}:test:runs", "while-hung") == "1", hang - 2)
    assert time.time() - hung_at < hang  # moved by the poller while the push still hung

    wait_until(lambda: killed_slot in pushes(c, prefix), hang + 15, message="the slot")
    assert pushes(c, prefix)[killed_slot] == {claimed_as}
    assert c.lrange(f"{prefix}:test:hung_pushes", 0, -1) == [str(killed_slot)]
    assert b.proc.poll() is None and "Traceback" not in b.log(), b.log()[-3000:]


def test_a_release_deferred_by_an_outage_lets_the_next_slot_fire_within_the_grace(
    worker, redis_server, prefix
):
    server = redis_server(extra=DURABLE)
    c = server.client()
    periodic = {
        "exclusive": {
            "cron": "*/4 * * * * *",
            "job": "testapp.jobs.periodic_span",
            "args": [1.2],
            "unique": "until_executed",
        }
    }
    # One process ticks (and runs nothing: it reads another queue), one runs the jobs
    # (and has no entries): the deferred release can only come from the runner's
    # heartbeat, after the ticker has found the slot blocked. The ticker's grace is
    # three of its beats (3 s); the runner beats every 1.5 s; the lock's active TTL
    # is long, so it can't simply lapse.
    ticking = worker(
        periodic=periodic,
        args=["-q", "elsewhere"],
        settings={"HEARTBEAT_INTERVAL": 1.0},
        redis_url=server.url,
        wait=False,
    )
    runner = worker(
        settings={"HEARTBEAT_INTERVAL": 1.5, "PERIODIC_ACTIVE_TTL": 60}, redis_url=server.url
    )
    ticking.wait_for_log(r"cogworker \S+ started", timeout=30)
    # A slot fired on time once both are up: the one the ticker fires as it starts (the
    # latest past slot, within PERIODIC_GRACE) may be so late that the next slot is
    # already due, and Redis would be back before its run ends.
    both_up = time.time()
    (run,) = wait_until(
        lambda: [r for r in spans(c, prefix) if r["slot"] > both_up], 12, message="a run"
    )
    assert run["pid"] == runner.pid
    server.stop()  # the run ends (after 1.2 s) while Redis is away: its release fails
    following = run["slot"] + 4
    sleep_until(following + 0.05)  # back once the next slot is due
    server.start()
    c = server.client()
    runner.wait_for_log(r"release of \S+ deferred", timeout=5)
    wait_until(
        lambda: [r for r in spans(c, prefix) if r["slot"] == following],
        8,
        message=f"the next slot ({following}) to fire, not the one after",
    )
    assert [r["slot"] for r in spans(c, prefix) if r["slot"] >= run["slot"]] == [
        run["slot"],
        following,
    ]
