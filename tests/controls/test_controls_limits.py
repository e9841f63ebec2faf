"""Fleet-wide limiters across real workers: a concurrency limit of 2 held by 2 processes
of 4 threads (overlap measured from the jobs' own stamps), a rate limit of 3 starts per
2 s, a lease of a SIGKILLed worker freed by orphan recovery; limit() in any code; the
settings and options checked."""

from __future__ import annotations

import json
import re
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from testapp import jobs as tj

from cogworker_django import OverLimit, api, conf, job, limit
from cogworker_django.controls import limits
from cogworker_django.store import runtime

from ..helpers import wait_until

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = pytest.mark.cluster

LIMITS = {"test-pair": {"concurrency": 2}, "test-rate": {"rate": 3, "per": 2}}


def runs(r, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def stamps(r, prefix) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for field, value in r.hgetall(f"{prefix}:test:timeline").items():
        jid, _, kind = field.rpartition(":")
        out.setdefault(jid, {})[kind] = float(value)
    return out


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _t, step in events:  # an end sorts before a start at the same instant
        now += step
        best = max(best, now)
    return best


def longest_stretch_below(intervals: list[tuple[float, float]], slots: int) -> float:
    """The longest time during which fewer than ``slots`` of ``intervals`` were running
    and that ended with a start (a slot left idle while a job waited: the tail, when
    nothing is left to start, does not count)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    longest, running, below_since = 0.0, 0, None
    for t, step in events:
        if step > 0 and below_since is not None:
            longest = max(longest, t - below_since)
        running += step
        if running >= slots:
            below_since = None
        elif below_since is None:
            below_since = t
    return longest


def test_concurrency_2_across_two_processes_of_four_threads(worker, r, prefix):
    tj.limited_pair.enqueue_many([(1.0, f"c{i}") for i in range(8)])
    settings = {"CONCURRENCY": 4, "LIMITS": LIMITS}
    a, b = worker(settings=settings), worker(settings=settings)
    wait_until(lambda: len(runs(r, prefix)) == 8, 60, message="all 8 limited jobs")
    timeline = stamps(r, prefix)
    intervals = [(t["start"], t["end"]) for t in timeline.values()]
    assert len(intervals) == 8
    assert max_overlap(intervals) <= 2, sorted(intervals)
    assert max_overlap(intervals) == 2  # the limit was used, not just respected
    assert set(runs(r, prefix).values()) == {1}
    # Over the limit is not a failure: nothing in retry or dead, no error logged.
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    assert "failed" not in a.log() + b.log()
    assert a.stop() == 0 and b.stop() == 0
    assert r.zcard(f"{prefix}:limit:test-pair:leases") == 0


def test_rate_3_per_2s_spreads_9_starts(worker, r, prefix):
    tj.limited_rate.enqueue_many([(f"r{i}",) for i in range(9)])
    w = worker(settings={"CONCURRENCY": 4, "LIMITS": LIMITS})
    wait_until(lambda: len(runs(r, prefix)) == 9, 60, message="all 9 rate-limited jobs")
    starts = sorted(t["start"] for t in stamps(r, prefix).values())
    assert len(starts) == 9
    # At most 3 in any 2 s: the 4th start after any start is 2 s later (the stamps are
    # taken just after the script's decision, on this host's clock: a little slack).
    slack = 0.5
    gaps = [starts[i + 3] - starts[i] for i in range(len(starts) - 3)]
    assert min(gaps) >= 2 - slack, gaps
    assert starts[-1] - starts[0] >= 4 - slack
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    assert w.stop() == 0


def test_a_killed_workers_lease_is_freed_by_orphan_recovery(worker, r, prefix):
    """The survivor runs first (on another queue, so it never takes the killing job): it
    judges the dead process ORPHAN_THRESHOLD after its last beat, well before the lease
    would lapse on its own (twice the threshold), so the freeing seen is recovery's."""
    leases = f"{prefix}:limit:test-pair:leases"
    settings = {"CONCURRENCY": 2, "LIMITS": LIMITS, "ORPHAN_THRESHOLD": 6}
    survivor = worker(settings=settings, args=["-q", "default"])
    tj.limited_kill_first_run.using(queue="doom").enqueue("k")
    doomed = worker(settings=settings, args=["-q", "doom"], wait=False)
    doomed.proc.wait(60)  # the job SIGKILLs its worker while holding its lease
    [member] = r.zrange(leases, 0, -1)
    survivor.wait_for_log(r"freed 1 limiter lease\(s\) of dead process", timeout=40)
    assert member not in r.zrange(leases, 0, -1)
    # The job itself went back to its queue (recovered, one orphaning counted).
    [raw] = r.lrange(f"{prefix}:queue:doom", 0, -1)
    assert json.loads(raw)["orphan_count"] == 1
    assert survivor.stop() == 0


def test_limit_blocks_then_raises_over_limit(configure, r, prefix):
    configure(LIMITS={"one": {"concurrency": 1}, "two-per-min": {"rate": 2, "per": 60}})
    with limit("one"):
        info = api.Limits().get("one")
        assert info is not None and info.in_use == 1 and info.holders[0].jid == "-"
        with pytest.raises(OverLimit, match="'one' is full within 0.3 s"):
            with limit("one", wait=0.3):
                pass
    with limit("one", wait=0):  # free again
        pass
    assert api.Limits().get("one").in_use == 0
    for _ in range(2):
        with limit("two-per-min", wait=0):
            pass
    with pytest.raises(OverLimit):
        with limit("two-per-min", wait=0.2):
            pass
    assert api.Limits().get("two-per-min").recent_starts == 2


def test_take_is_one_decision_for_every_limiter(configure):
    configure(LIMITS={"a": {"concurrency": 1}, "b": {"concurrency": 1}})
    held = limits.take(["b"], None)
    assert isinstance(held, limits.Lease)
    refused = limits.take(["a", "b"], None)
    assert isinstance(refused, limits.Refusal) and refused.name == "b"
    # Nothing was taken in "a" by the refused decision.
    assert api.Limits().get("a").in_use == 0
    limits.release(held)
    both = limits.take(["a", "b"], None)
    assert isinstance(both, limits.Lease)
    limits.release(both)
    assert [i.in_use for i in api.Limits().all()] == [0, 0]


@pytest.mark.parametrize(
    "value, message",
    [
        ([], "expected a dict"),
        ({"bad name": {"concurrency": 1}}, "non-empty string without whitespace"),
        ({"x": {"concurrency": 0}}, "integer >= 1"),
        ({"x": {"concurrency": True}}, "integer >= 1"),
        ({"x": {"rate": 5}}, "go together"),
        ({"x": {"rate": 5, "per": 0}}, "seconds > 0"),
        ({"x": {"rate": 1.5, "per": 1}}, "integer >= 1"),
        ({"x": {"burst": 3}}, "unknown field"),
        ({"x": {}}, "expected"),
    ],
)
def test_bad_limits_settings_are_refused(configure, value, message):
    configure(LIMITS=value)
    with pytest.raises(ImproperlyConfigured, match=message):
        conf.get()


def charge():  # pragma: no cover - never registered: its limiter is unknown
    pass


def test_unknown_limiter_names_are_refused_at_job_and_using(configure):
    with pytest.raises(ImproperlyConfigured, match="unknown limiter\\(s\\) 'nope'"):
        job(limits=["nope"])(charge)

    configure(LIMITS=LIMITS)
    assert tj.noop.using(limits=["test-pair"])._build((), {})["limits"] == ["test-pair"]
    with pytest.raises(ImproperlyConfigured, match="'missing'"):
        tj.noop.using(limits=["test-pair", "missing"])
    with pytest.raises(ValueError, match="list of limiter names"):
        tj.noop.using(limits="test-pair")
    with pytest.raises(ImproperlyConfigured):
        with limit("missing"):
            pass


def test_limits_page_data_names_the_holders(configure, r, prefix):
    configure(LIMITS=LIMITS)
    lease = limits.take(["test-pair"], {"jid": "abc", "func": "app.jobs.charge"})
    try:
        [pair] = [i for i in api.Limits().all() if i.name == "test-pair"]
        assert pair.in_use == 1 and pair.concurrency == 2
        [holder] = pair.holders
        assert (holder.jid, holder.job, holder.identity) == (
            "abc",
            "app.jobs.charge",
            runtime.current().identity,
        )
        assert "at most 2 at once" in pair.describe
    finally:
        limits.release(lease)
    assert json.dumps([i.name for i in api.Limits().all()]) == '["test-pair", "test-rate"]'


def test_a_worker_refuses_to_start_when_a_job_names_an_unknown_limiter(worker):
    w = worker(settings={"LIMITS": {"test-rate": {"rate": 3, "per": 2}}}, wait=False)
    assert w.wait(60) != 0
    assert "unknown limiter(s) 'test-pair'" in w.log()


def test_a_lease_lost_while_its_run_goes_on_is_put_back_by_the_heartbeat(worker, r, prefix):
    """As after a failover that lost the write, or an outage longer than its lifetime."""
    leases = f"{prefix}:limit:test-pair:leases"
    tj.limited_pair.enqueue(3.0, "long")
    w = worker(settings={"CONCURRENCY": 1, "LIMITS": LIMITS})
    [member] = wait_until(lambda: r.zrange(leases, 0, -1), 15, message="the run's lease")
    r.zrem(leases, member)
    w.wait_for_log(r"lease of test-pair put back", timeout=15)
    assert r.zrange(leases, 0, -1) == [member]
    wait_until(lambda: runs(r, prefix).get("long") == 1, 15, message="the run to end")
    wait_until(lambda: r.zcard(leases) == 0, 10, message="its lease released")
    assert w.stop() == 0


def test_an_abandoned_run_keeps_its_lease_until_its_body_returns(worker, configure, r, prefix):
    """Limit 3, six jobs with timeout=2 stuck 20 s in a C call, at the production
    TIMEOUT_GRACE (10 s): the first three are abandoned at about 12 s with their bodies
    still inside. Their leases stay held (refreshed by the heartbeat, well past a lease's
    6 s lifetime here) and are shown as abandoned runs' until the bodies return; the
    other three start only then. Measured from the jobs' own stamps: never more than 3
    bodies inside at once."""
    assert conf._validate({}).TIMEOUT_GRACE == 10.0
    seconds = 20.0
    tj.limited_stuck_in_c.enqueue_many([(seconds,) for _ in range(6)])
    trio = {**LIMITS, "test-pair": {"concurrency": 3}}
    configure(LIMITS=trio)
    w = worker(settings={"CONCURRENCY": 6, "LIMITS": trio})
    w.wait_for_log(r"abandoned and the job filed", timeout=60)

    def abandoned_holders():
        info = api.Limits().get("test-pair")
        return [h for h in info.holders if h.abandoned] if info else []

    wait_until(lambda: len(abandoned_holders()) == 3, 20, message="3 abandoned holders")
    assert api.Limits().get("test-pair").in_use == 3
    wait_until(lambda: len(stamps(r, prefix)) == 6, 90, message="all six bodies entered")
    timeline = stamps(r, prefix)
    intervals = [(t["start"], t["end"]) for t in timeline.values()]
    assert max_overlap(intervals) <= 3, sorted(intervals)
    # The first three came back (their leases released then): the next three hold theirs.
    w.wait_for_log(r"came back from its job after the watchdog abandoned it", 20, count=3)
    assert r.zcard(f"{prefix}:limit:test-pair:leases") == 3
    # One failure line per run, from the watchdog (none when a stuck thread comes back).
    log = w.log()
    assert len(re.findall(r"failed: JobTimeout", log)) == len(re.findall(r"abandoned and", log))
    assert w.stop() == 0
    assert r.zcard(f"{prefix}:limit:test-pair:leases") == 0


# Waiting jobs use what a limiter allows, at the production POLL_INTERVAL (5 s): a
# refused job is parked and moved back as soon as there is room, not at the next poll.
PRODUCTION_POLL = {"POLL_INTERVAL": 5.0, "FETCH_IDLE_MAX_INTERVAL": 1.0}


def test_waiting_jobs_use_a_concurrency_limit_fully(worker, r, prefix):
    """20 one-second jobs under a limit of 2 across two workers: the jobs' own stamps
    show no slot left idle for anything near a poll (a parked job moved back only by the
    poller would leave one idle for up to POLL_INTERVAL, 5 s), and the 2 slots busy
    >= 80% of the time from the first start to the last end (>= 90% on an idle machine;
    a loaded one, the suite on 4 workers, spreads the starts: the code before the
    thread's own fetch gave 0.83 - 0.89 there too)."""
    assert conf._validate({}).POLL_INTERVAL == PRODUCTION_POLL["POLL_INTERVAL"]
    tj.limited_pair.enqueue_many([(1.0, f"u{i}") for i in range(20)])
    settings = {"CONCURRENCY": 5, "LIMITS": LIMITS, **PRODUCTION_POLL}
    a, b = worker(settings=settings), worker(settings=settings)
    wait_until(lambda: len(runs(r, prefix)) == 20, 90, message="all 20 limited jobs")
    intervals = [(t["start"], t["end"]) for t in stamps(r, prefix).values()]
    assert len(intervals) == 20 and max_overlap(intervals) <= 2, sorted(intervals)
    busy = sum(end - start for start, end in intervals)
    span = max(end for _, end in intervals) - min(start for start, _ in intervals)
    utilisation = busy / (2 * span)
    idle = longest_stretch_below(intervals, 2)
    assert idle < 2.0, (idle, sorted(intervals))  # a poll would leave up to 5 s
    assert utilisation >= 0.8, (utilisation, span, sorted(intervals))
    assert set(runs(r, prefix).values()) == {1}
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    assert a.stop() == 0 and b.stop() == 0
    assert r.zcard(f"{prefix}:limit:test-pair:waiting") == 0
    assert r.zcard(f"{prefix}:schedule") == 0


def test_waiting_jobs_use_a_rate_limit_fully(worker, r, prefix):
    """18 starts at 3 per 2 s: never more than 3 in any 2 s, and the 6 windows follow
    each other with >= 90% of the ideal pace (10 s from the first start to the last)."""
    tj.limited_rate.enqueue_many([(f"p{i}",) for i in range(18)])
    w = worker(settings={"CONCURRENCY": 4, "LIMITS": LIMITS, **PRODUCTION_POLL})
    wait_until(lambda: len(runs(r, prefix)) == 18, 90, message="all 18 rate-limited jobs")
    starts = sorted(t["start"] for t in stamps(r, prefix).values())
    assert len(starts) == 18
    slack = 0.5  # the stamps are taken just after the script's decision, on this host
    gaps = [starts[i + 3] - starts[i] for i in range(len(starts) - 3)]
    assert min(gaps) >= 2 - slack, gaps
    ideal = (18 / 3 - 1) * 2
    utilisation = ideal / (starts[-1] - starts[0])
    assert utilisation >= 0.9, (utilisation, starts)
    assert w.stop() == 0
    assert r.zcard(f"{prefix}:limit:test-rate:waiting") == 0


def test_a_sigkill_while_jobs_wait_for_a_lease_loses_none(worker, r, prefix):
    """The only worker is SIGKILLed with two jobs holding the leases and others waiting:
    the waiting ones are in the schedule (filed with their ack, one script), the running
    ones on its in-progress list. A new worker recovers the running ones, frees their
    leases, and its waker brings the waiting ones back long before their fallback."""
    tj.limited_pair.enqueue_many([(1.0, f"k{i}") for i in range(12)])
    settings = {"CONCURRENCY": 6, "LIMITS": LIMITS, **PRODUCTION_POLL}
    doomed = worker(settings=settings)
    waiting = f"{prefix}:limit:test-pair:waiting"
    schedule = f"{prefix}:schedule"
    wait_until(lambda: r.zcard(schedule) >= 4, 30, message="jobs filed to wait for a lease")
    doomed.kill()
    # Some still waiting at the kill (its waker may have moved one or two back to the
    # queue between the look above and the kill, as a lease was released).
    assert r.zcard(schedule) >= 1

    # The index is only a pointer, and may name a job that is not in the schedule: one
    # still on the killed worker's list (killed between its entry and its filing), or
    # one the waker moved before the entry's second write (a stale entry, which a look
    # drops). What must hold is below: each of the twelve runs, the index ends empty.
    survivor = worker(settings=settings)
    # (their fallback score is a minute away: the waker brought them back)
    try:
        wait_until(lambda: len(runs(r, prefix)) == 12, 90, message="all 12 jobs, none lost")
    except AssertionError as exc:
        # What the waker and the recovery left, for a failure seen only under load.
        state = {
            "runs": sorted(runs(r, prefix)),
            "waiting": r.zrange(waiting, 0, -1, withscores=True),
            "schedule": r.zrange(f"{prefix}:schedule", 0, -1, withscores=True),
            "redis time": r.time(),
        }
        raise AssertionError(
            f"{exc}\n{state}\n--- survivor ---\n{survivor.log()[-4000:]}"
        ) from None
    assert r.zcard(f"{prefix}:dead") == 0
    # A stale entry (its job moved or run) is dropped by the waker's next look (each
    # release, each POLL_INTERVAL).
    wait_until(lambda: r.zcard(waiting) == 0, 15, message="the index emptied")
    assert survivor.stop() == 0
    assert r.zcard(f"{prefix}:schedule") == 0


def test_a_worker_killed_right_after_filing_a_waiting_job_leaves_it_indexed(worker, r, prefix):
    """SIGKILL between a refused job's filing in the schedule and its index write (the
    fault middleware kills the process there): the job was indexed before its filing,
    so the survivor's waker brings it back long before its fallback score (a minute)."""
    from testapp import faults

    tj.limited_pair.enqueue_many([(1.0, f"f{i}") for i in range(3)])
    r.set(faults.kill_after_filing_key(), 1)
    killer = {"client": [], "server": ["testapp.faults.KillAfterFilingAWaitingJob"]}
    settings = {"CONCURRENCY": 3, "LIMITS": LIMITS, **PRODUCTION_POLL}
    doomed = worker(settings={**settings, "MIDDLEWARE": killer})
    assert doomed.proc.wait(60) == -9  # it filed the third job and died
    [filed] = r.zrange(f"{prefix}:schedule", 0, -1, withscores=True)
    assert filed[1] - time.time() > 50  # its fallback is a minute away
    assert r.zrange(f"{prefix}:limit:test-pair:waiting", 0, -1) == [filed[0]]
    survivor = worker(settings=settings)
    # (the two running jobs come back with the orphan recovery; the filed one at once)
    wait_until(lambda: len(runs(r, prefix)) == 3, 40, message="all 3 jobs, none lost")
    assert survivor.stop() == 0
    assert r.zcard(f"{prefix}:schedule") == 0 and r.zcard(f"{prefix}:dead") == 0
