"""Exactly-once callbacks under fault injection: batches over three worker processes
while a chaos loop SIGKILLs workers (mid-run, mid-bookkeeping, wherever they are) and
restarts Redis (with the append-only file fsynced on every write, so nothing
acknowledged is lost). Every on_success and on_complete is pushed exactly once (one jid
per batch and event, counted from the callbacks' own trace) and none runs before its
batch has finished.

Each kill lands on a worker that is running and has jobs taken (its in-progress list not
empty, replacements waited for until they are), and the test shows what the kills hit:
a survivor's log names each killed process it recovered jobs from, and members ran
twice (their runs are counted)."""

from __future__ import annotations

import json
import random
import re
import time
from collections import defaultdict

from testapp import jobs as tj

from cogworker_django import Batch, api
from cogworker_django.store import keys

from ..helpers import wait_until

BATCHES = 200
SIZE = 20
WORKERS = 3
# The member's own work: long enough that kills land in the middle of runs.
WORK_SECONDS = 0.02


def test_every_callback_fires_exactly_once_through_kills_and_a_redis_restart(
    redis_server, configure, worker, prefix
):
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    r = server.client()
    settings = {"CONCURRENCY": 4}
    procs = [worker(redis_url=server.url, settings=settings) for _ in range(WORKERS)]
    everyone = list(procs)  # with the killed ones: their logs too

    labels = [f"b{i}" for i in range(BATCHES)]
    bids = {}
    rng = random.Random(1234)
    kills = 0
    hit: dict[str, int] = {}  # identity killed -> jobs on its in-progress list then
    cut: set[str] = set()  # members on a killed worker's list ("label:i")
    started = time.monotonic()
    last_chaos = time.monotonic()

    def taken(w) -> int:
        """Jobs the worker has taken now (0 before it has started)."""
        found = re.search(r"started: identity=(\S+) ", w.log())
        return r.llen(keys.inprogress(found.group(1), keys.root())) if found else 0

    def chaos() -> None:
        nonlocal kills, last_chaos
        if time.monotonic() - last_chaos < 1.0:
            return
        last_chaos = time.monotonic()
        # A worker running with jobs taken: replacements still booting are waited for,
        # and a moment with none (the queue ran dry) is no moment for a kill.
        order = rng.sample(range(len(procs)), len(procs))
        try:
            i = wait_until(lambda: next((j + 1 for j in order if taken(procs[j])), 0), 10, 0.01) - 1
        except AssertionError:
            return
        victim = procs[i]
        ident = re.search(r"started: identity=(\S+) ", victim.log()).group(1)
        victim.kill()  # SIGKILL: no hand-over; its jobs wait for orphan recovery
        kills += 1
        listed = [json.loads(raw) for raw in r.lrange(keys.inprogress(ident, keys.root()), 0, -1)]
        hit[ident] = len(listed)
        cut.update(
            f"{job['args'][0]}:{job['args'][1]}"
            for job in listed
            if job["func"].endswith("wf_chaos_member")
        )
        procs[i] = worker(redis_url=server.url, settings=settings, wait=False)
        everyone.append(procs[i])

    for n, label in enumerate(labels):
        with Batch(
            description=label,
            on_success=tj.wf_chaos_callback.s(label, "success", SIZE),
            on_complete=tj.wf_chaos_callback.s(label, "complete", SIZE),
        ) as batch:
            tj.wf_chaos_member.enqueue_many([(label, i, WORK_SECONDS) for i in range(SIZE)])
        bids[label] = batch.bid
        if n % 20 == 0:
            chaos()

    def fired() -> int:
        return r.llen(f"{prefix}:test:chaos:callbacks")

    # Kill while the batches run, restart Redis once in the middle of it.
    restarted = False
    deadline = time.monotonic() + 30
    while fired() < 2 * BATCHES * 0.8 and time.monotonic() < deadline:
        chaos()
        if not restarted and fired() > BATCHES * 0.6:
            server.restart()  # SIGKILL of redis-server, then the same port, same AOF
            restarted = True
        time.sleep(0.1)
    if not restarted:
        server.restart()
        restarted = True

    def distinct() -> int:
        seen = {tuple(e.split("|")[:2]) for e in r.lrange(f"{prefix}:test:chaos:callbacks", 0, -1)}
        return len(seen)

    wait_until(lambda: distinct() == 2 * BATCHES, 90, 0.25, message="every callback")
    # Let anything still due run (a duplicate would show up now), then look.
    wait_until(
        lambda: (
            r.llen(keys.queue("default")) == 0
            and all(r.llen(k) == 0 for k in r.keys(f"{prefix}:inprogress:*"))
        ),
        60,
        0.25,
        message="queues and in-progress lists empty",
    )

    runs: dict[tuple[str, str], set[str]] = defaultdict(set)
    repeats = 0
    early = []
    for entry in r.lrange(f"{prefix}:test:chaos:callbacks", 0, -1):
        label, event, jid, done, size = entry.split("|")
        if jid in runs[(label, event)]:
            repeats += 1  # the same callback job delivered again after its worker died
        runs[(label, event)].add(jid)
        if int(done) != int(size):
            early.append((label, event, int(done), int(size), entry))
    batches = api.Batches()
    statuses = {label: batches.get(bid) for label, bid in bids.items()}
    # on_success waits for every member's success: it must see every member done.
    # on_complete comes once every member has succeeded or failed at least once (a member
    # whose own write met the Redis restart fails once, and is retried): it may see fewer
    # done, but never fewer than the members that had not failed.
    too_early = [
        entry
        for label, event, done, size, entry in early
        if event == "success"
        or statuses[label] is None
        or done + statuses[label].failed_jobs < size
    ]
    assert too_early == [], f"callbacks that ran before their batch finished: {too_early[:5]}"
    doubled = {k: v for k, v in runs.items() if len(v) != 1}
    assert doubled == {}, f"callbacks pushed more than once: {list(doubled.items())[:5]}"
    assert len(runs) == 2 * BATCHES

    for label in bids:
        status = statuses[label]
        assert status is not None and status.state == "succeeded", (label, status)
        assert status.total == SIZE and status.succeeded == SIZE
        assert {status.complete_jid} == runs[(label, "complete")]
        assert {status.success_jid} == runs[(label, "success")]
        assert r.scard(f"{prefix}:test:chaos:done:{label}") == SIZE
    assert restarted
    # The kills hit running work: each left jobs on its list (taken, not acked), and a
    # survivor recovered them, naming the dead process; members ran twice.
    hits = [ident for ident, n in hit.items() if n > 0]
    assert len(hits) >= 3, (kills, hit)
    logs = "\n".join(w.log() for w in everyone)
    recovered = set(re.findall(r"recovered \d+ job\(s\) from dead process (\S+)", logs))
    assert set(hits) <= recovered, (hit, recovered)
    member_runs = {k: int(v) for k, v in r.hgetall(f"{prefix}:test:chaos:runs").items()}
    assert len(member_runs) == BATCHES * SIZE
    twice = sorted(m for m in cut if member_runs[m] > 1)
    assert twice, f"no member on a killed worker's list ran twice: no kill cut a run {cut}"
    print(
        f"\n{BATCHES} batches of {SIZE}: {kills} SIGKILLs ({len(hits)} with jobs taken), "
        f"one Redis restart, {len(twice)} member(s) cut by a kill run again, "
        f"{repeats} callback re-deliveries after a kill, {len(early)} on_complete after a "
        f"member's failure, {time.monotonic() - started:.1f}s"
    )
