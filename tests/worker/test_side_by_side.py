"""Plain and async jobs side by side (docs/workers.md "Plain and async jobs side by
side"): a fetch takes async jobs only for the event loop's free slots and plain ones only
for free threads (lua/fetch.lua, by the async jobs' paths), so with plain jobs on one
queue and coroutines on another both sides run at once, and a process never takes jobs
it cannot start now.

Before: a fetch asked for the loop's slots only once an async job had been seen, and
took jobs of either kind from the first queue that had some; with plain jobs on the first
queue, the coroutines on the second waited until the plain ones were nearly drained (or
a probe every 5 s), and jobs fetched for the busy side waited in this process.
"""

from __future__ import annotations

import time

from testapp import async_jobs as aj
from testapp import jobs

from cogworker_django.store import keys

from ..helpers import wait_until


def _counts(r) -> tuple[int, int]:
    runs = r.hgetall(jobs.runs_key())
    plain = sum(1 for k in runs if k.startswith("p"))
    return plain, len(runs) - plain


def test_plain_and_async_jobs_on_two_queues_run_side_by_side(configure, worker, r):
    """4 threads and 20 loop slots; 80 plain jobs of 0.2 s on `plain` (read first) and 80
    coroutines of 1 s on `aq`: each side alone takes 4 s. When half the plain jobs are
    done, the coroutines are running too (before: none had started)."""
    jobs.slow.using(queue="plain").enqueue_many([(0.2, f"p{i}") for i in range(80)])
    aj.gauge_wait.using(queue="aq").enqueue_many([(1.0, f"a{i}") for i in range(80)])
    worker(args=["-c", "4", "--async-concurrency", "20", "-q", "plain", "-q", "aq"])
    samples = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        plain, async_ = _counts(r)
        samples.append((plain, async_, int(r.get(aj.key("gauge")) or 0)))
        if plain >= 80 and async_ >= 80:
            break
        time.sleep(0.05)
    assert samples[-1][:2] == (80, 80), samples[-1]
    at_half = next(s for s in samples if s[0] >= 40)
    assert at_half[1] >= 20, samples  # one full round of the 20 slots at least
    # The loop's slots stayed busy while plain jobs ran (a gauge of the coroutines in).
    while_plain = [g for p, _a, g in samples if 8 <= p < 72]
    assert sum(while_plain) / len(while_plain) >= 14, samples


def test_a_process_takes_no_plain_job_it_cannot_start(configure, worker, r):
    """2 threads and 10 loop slots; 24 plain jobs of 0.5 s on `plain` (read first) and
    40 coroutines of 0.5 s on `aq`: this process's in-progress list never holds more
    plain jobs than its 2 threads run, so another worker starting now would find the
    others waiting. (Before: once an async job had come, each fetch asked for threads and
    slots together and took plain jobs for the slots, which waited here for a thread.)"""
    jobs.slow.using(queue="plain").enqueue_many([(0.5, f"p{i}") for i in range(24)])
    aj.gauge_wait.using(queue="aq").enqueue_many([(0.5, f"a{i}") for i in range(40)])
    w = worker(args=["-c", "2", "--async-concurrency", "10", "-q", "plain", "-q", "aq"])
    inprogress = None
    most = 0
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and _counts(r) != (24, 40):
        if inprogress is None:
            found = [k for k in r.keys(f"{keys.prefix()}:inprogress:*") if f":{w.pid}:" in k]
            inprogress = found[0] if found else None
        if inprogress:
            listed = r.lrange(inprogress, 0, -1)
            most = max(most, sum("testapp.jobs.slow" in raw for raw in listed))
        time.sleep(0.02)
    assert _counts(r) == (24, 40)
    assert inprogress and most <= 2, most


def test_async_jobs_behind_plain_ones_on_one_queue_still_start(configure, worker, r):
    """One shared queue: the fetch stops at a job of a kind with no room, and a thread or
    a slot coming free ends the wait at once (no spin, no stall): 30 plain jobs of 0.1 s
    and 30 coroutines of 0.3 s, interleaved, all done."""
    for i in range(30):
        jobs.slow.enqueue(0.1, f"p{i}")
        aj.gauge_wait.enqueue(0.3, f"a{i}")
    worker(args=["-c", "2", "--async-concurrency", "3"])
    wait_until(lambda: _counts(r) == (30, 30), 40, message="every job ran")
