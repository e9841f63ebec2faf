"""The invariants, checked after the drain from Redis, the jobs' traces and the logs.

A fault *touches* a run when the run was going on (or had just ended: its ack may not
have been written yet, ``ACK_GRACE``) during the fault's window; for a fault on a worker
only runs in that worker's processes count. docs/reliability.md allows one extra run per
fault that touched a job, and none for a job that settled before any fault.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from .faults import REDIS_DOWN_KINDS, WORKER_KINDS, Fault, Journal, clock
from .producer import Enqueued

# A finished job's ack rides on its process's next fetch: a run that ended this shortly
# before a fault may not be settled yet, and may run again.
ACK_GRACE = 3.0
# A SIGSTOPped process goes on with the jobs it had fetched once it resumes.
STOP_AFTER = 5.0
# After Redis answers again, the ticker needs a tick or two (and reconnects).
REDIS_GRACE = 3.0
# A per-entry key of the wrong type: the entry backs off 5 s after its first failure.
CORRUPT_GRACE = 6.0
# An until_executed entry's claim takes its running lock for PERIODIC_ACTIVE_TTL plus
# this (docs/periodic.md), until the push confirms it.
CLAIM_MARGIN = 30.0
# The fleet drains within this many seconds of the last fault (docs/reliability.md):
# a killed worker's jobs are back within 15 s (the lifeline), a TERMed one's at once.
DRAIN_LIMIT = 60.0

JID = re.compile(rb'"jid":\s*"([^"]+)"')
ENQUEUED = re.compile(rb"periodic (\S+): slot (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) enqueued as (\S+)")
BLOCKED = re.compile(rb"periodic (\S+): slot (\S+) skipped: the previous run \((\S+)\) still holds")
DIED = re.compile(rb"^.*(?: died\b|Exception in thread).*$", re.M)


@dataclass
class Run:
    jid: str
    kind: str
    pid: int
    ppid: int
    start: float
    rc: int
    oc: int
    token: str | None = None
    key: int | None = None
    entry: str | None = None
    slot: int | None = None
    end: float | None = None
    ok: bool | None = None


@dataclass
class Invariant:
    name: str
    failures: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass
class Figures:
    """What the table shows."""

    jobs: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    duplicates_refused: int = 0
    enqueue_errors: int = 0
    errors_that_ran: int = 0
    runs: int = 0
    extra_runs: int = 0
    extra_by_kind: dict[str, int] = field(default_factory=dict)
    extra_unexplained: int = 0
    succeeded: int = 0
    dead: int = 0
    dead_reasons: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    pending: int = 0
    slots: dict[str, dict[str, int]] = field(default_factory=dict)
    stalls: int = 0
    longest_stall: float = 0.0
    # The last fault (what it was, when the chaos stopped applying it) and how long after
    # it everything was settled (None: not within the soak's --drain).
    last_fault: str = ""
    last_fault_over: float | None = None
    drain_after: float | None = None


def parse_iso(text: bytes) -> int:
    return calendar.timegm(time.strptime(text.decode(), "%Y-%m-%dT%H:%M:%SZ"))


# Loading -------------------------------------------------------------------------------


def load_runs(trace_dir: Path) -> dict[str, list[Run]]:
    records = []
    for path in sorted(trace_dir.glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut by SIGKILL mid-write (os.write makes it unlikely)
    records.sort(key=lambda r: r["t"])
    runs: dict[str, list[Run]] = defaultdict(list)
    open_runs: dict[tuple[str, int], list[Run]] = defaultdict(list)
    for r in records:
        jid = r.get("jid") or "?"
        if r["e"] == "start":
            run = Run(
                jid,
                r["kind"],
                r["pid"],
                r["ppid"],
                r["t"],
                r["rc"],
                r["oc"],
                r.get("token"),
                r.get("key"),
                r.get("entry"),
                r.get("slot"),
            )
            runs[jid].append(run)
            open_runs[(jid, r["pid"])].append(run)
        else:
            candidates = open_runs.get((jid, r["pid"])) or []
            match = next((c for c in candidates if c.rc == r["rc"] and c.oc == r["oc"]), None)
            if match is None and candidates:
                match = candidates[0]
            if match is not None:
                candidates.remove(match)
                match.end, match.ok = r["t"], bool(r.get("ok"))
    return runs


@dataclass
class RedisState:
    dead: dict[str, dict[str, Any]]
    pending: dict[str, str]  # jid -> where it still is
    unique_locks: list[tuple[str, str, int]]  # key, owner, ttl
    running_locks: list[tuple[str, str, int]]
    no_ttl: list[str]  # keys that should expire but don't
    other_dead: list[str]  # dead entries that are not jobs of this soak


def read_redis(conn: redis.Redis, prefix: str) -> RedisState:
    p = prefix
    dead: dict[str, dict[str, Any]] = {}
    other_dead = []
    for raw in conn.zrange(f"{p}:dead", 0, -1):
        try:
            job = json.loads(raw)
        except ValueError:
            other_dead.append(repr(raw[:200]))
            continue
        if not isinstance(job, dict) or "jid" not in job:
            other_dead.append(repr(raw[:200]))
            continue
        dead[job["jid"]] = job
    pending: dict[str, str] = {}

    def note(key: bytes | str, members: list[bytes]) -> None:
        where = key.decode() if isinstance(key, bytes) else key
        for m in members:
            found = JID.search(m)
            pending[found.group(1).decode() if found else repr(m[:80])] = where

    for pattern in (f"{p}:queue:*", f"{p}:inprogress:*"):
        for key in conn.scan_iter(match=pattern, count=1000):
            if conn.type(key) == b"list":
                note(key, conn.lrange(key, 0, -1))
    for key in conn.scan_iter(match=f"{p}:pqueue:*", count=1000):
        if conn.type(key) == b"zset":
            note(key, conn.zrange(key, 0, -1))
    for key in (f"{p}:schedule", f"{p}:retry"):
        if conn.type(key) == b"zset":
            note(key, conn.zrange(key, 0, -1))
    if conn.type(f"{p}:unsettled") == b"list":
        note(f"{p}:unsettled", conn.lrange(f"{p}:unsettled", 0, -1))

    def locks(pattern: str) -> list[tuple[str, str, int]]:
        out = []
        for key in conn.scan_iter(match=pattern, count=1000):
            owner = conn.get(key) if conn.type(key) == b"string" else b"<wrong type>"
            out.append((key.decode(), (owner or b"").decode(errors="replace"), conn.ttl(key)))
        return out

    unique_locks = locks(f"{p}:unique:*")
    running_locks = locks(f"{p}:periodic:running:*")
    no_ttl = []
    for pattern in (f"{p}:periodic:lock:*", f"{p}:process:*", f"{p}:work:*", f"{p}:result:*"):
        for key in conn.scan_iter(match=pattern, count=1000):
            if conn.ttl(key) == -1:
                no_ttl.append(key.decode())
    return RedisState(dead, pending, unique_locks, running_locks, no_ttl, other_dead)


# Touching ------------------------------------------------------------------------------


def end_of(run: Run, faults: list[Fault]) -> float | None:
    """When ``run`` ended, or for one that never wrote its end, when the worker fault
    that cut it ended (None if none did)."""
    if run.end is not None:
        return run.end
    cuts = [
        f.stop_time
        for f in faults
        if f.kind in ("kill", "term")
        and (run.pid in f.pids or run.ppid in f.pids)
        and f.stop_time >= run.start
    ]
    return min(cuts) if cuts else None


def touches(f: Fault, run: Run) -> bool:
    a, b = f.start, f.stop_time
    if f.kind in WORKER_KINDS:
        if run.pid not in f.pids and run.ppid not in f.pids:
            return False
        b += STOP_AFTER if f.kind == "stop" else 0.0
    else:
        b += 1.0
    return run.start <= b and (run.end is None or run.end >= a - ACK_GRACE)


# The checks ----------------------------------------------------------------------------


@dataclass
class Context:
    records: list[Enqueued]
    runs: dict[str, list[Run]]
    state: RedisState
    journal: Journal
    logs: list[Path]
    entries: dict[str, bool]  # periodic entry name -> until_executed
    disabled_at: float
    soak_end: float
    max_orphanings: int
    active_ttl: float
    stop_codes: dict[str, int | None]
    entry_queues: dict[str, str] = field(default_factory=dict)  # entry -> its runs' queue
    # (entry, slot) -> whether its per-slot lock was seen (sampled while it lived)
    claimed: dict[tuple[str, int], bool] = field(default_factory=dict)
    # When nothing was left anywhere (the start of the drain's quiet stretch), None when
    # the drain gave up.
    drained_at: float | None = None
    figures: Figures = field(default_factory=Figures)


def check_all(ctx: Context) -> list[Invariant]:
    jobs = _jobs(ctx)
    return [
        _lost(ctx, jobs),
        _runs(ctx, jobs),
        _overlap(ctx),
        *_periodic(ctx),
        _locks(ctx, jobs),
        _keyguard(ctx),
        _threads(ctx),
        _drained(ctx),
        _drained_in_time(ctx),
    ]


def _jobs(ctx: Context) -> dict[str, dict[str, Any]]:
    """jid -> {"expected": runs, "rec": Enqueued or None, "kind": ...} for every job that
    reached Redis: accepted by it, or shown to have by a run (a push that raised after
    Redis applied it), and every periodic run."""
    f = ctx.figures
    jobs: dict[str, dict[str, Any]] = {}
    by_token: dict[str, list[str]] = defaultdict(list)
    by_key: dict[tuple[str, int], list[str]] = defaultdict(list)
    for jid, runs in ctx.runs.items():
        r0 = runs[0]
        if r0.token:
            by_token[r0.token].append(jid)
        elif r0.key is not None:
            by_key[(r0.kind, r0.key)].append(jid)
    accepted = set()
    for rec in ctx.records:
        if rec.status == "accepted" and rec.jid:
            accepted.add(rec.jid)
            jobs[rec.jid] = {"expected": rec.expected_runs, "rec": rec, "kind": rec.kind}
        elif rec.status == "duplicate":
            f.duplicates_refused += 1
    errored_keys: dict[tuple[str, int], int] = defaultdict(int)
    for rec in ctx.records:
        if rec.status != "error":
            continue
        f.enqueue_errors += 1
        if rec.token:
            for jid in by_token.get(rec.token, []):
                jobs[jid] = {"expected": rec.expected_runs, "rec": rec, "kind": rec.kind}
                f.errors_that_ran += 1
        elif rec.key is not None:
            errored_keys[(rec.kind, rec.key)] += 1
    for (kind, key), count in errored_keys.items():
        for jid in [j for j in by_key.get((kind, key), []) if j not in accepted][:count]:
            jobs[jid] = {"expected": 1, "rec": None, "kind": kind}
            f.errors_that_ran += 1
    for jid, runs in ctx.runs.items():
        if runs[0].entry and jid not in jobs:
            jobs[jid] = {"expected": 1, "rec": None, "kind": runs[0].kind}
    f.jobs = len(jobs)
    for j in jobs.values():
        f.by_kind[j["kind"]] = f.by_kind.get(j["kind"], 0) + 1
    return jobs


def _faults_during(ctx: Context, kinds: tuple[str, ...], start: float, end: float) -> list[Fault]:
    return [
        f for f in ctx.journal.faults if f.kind in kinds and f.start <= end and f.stop_time >= start
    ]


def _lost(ctx: Context, jobs: dict[str, dict[str, Any]]) -> Invariant:
    inv = Invariant("no job lost")
    f = ctx.figures
    for jid, j in jobs.items():
        runs = ctx.runs.get(jid, [])
        if any(r.ok for r in runs):
            f.succeeded += 1
            if jid in ctx.state.dead:
                inv.info.append(f"{jid} ({j['kind']}) succeeded and is also in dead")
            continue
        dead = ctx.state.dead.get(jid)
        if dead is not None:
            f.dead += 1
            reason = str(dead.get("error_class") or "?")
            f.dead_reasons[reason] = f.dead_reasons.get(reason, 0) + 1
            since = j["rec"].t if j["rec"] else min((r.start for r in runs), default=0.0)
            worker_faults = _faults_during(
                ctx, ("kill", "stop"), since, float(dead.get("failed_at") or ctx.soak_end)
            )
            if reason == "OrphanedTooOften" and len(worker_faults) >= ctx.max_orphanings + 1:
                inv.info.append(
                    f"{jid} ({j['kind']}) dead, OrphanedTooOften, after {len(worker_faults)} "
                    "worker faults in its life"
                )
            else:
                inv.failures.append(
                    f"{jid} ({j['kind']}) in dead for {reason}: {dead.get('error_message')!r}; "
                    f"{len(runs)} runs; worker faults in its life: {len(worker_faults)}"
                )
            continue
        where = ctx.state.pending.get(jid)
        if where is not None:
            f.pending += 1
            inv.failures.append(f"{jid} ({j['kind']}) not finished: still in {where}")
            continue
        f.lost += 1
        rec = j["rec"]
        inv.failures.append(
            f"{jid} ({j['kind']}, {rec.how if rec else 'periodic'}, enqueued "
            f"{clock(rec.t) if rec else '-'}) LOST: no successful run, not in dead, nowhere "
            f"in Redis; runs: {_runs_text(runs)}"
        )
    for other in ctx.state.other_dead:
        inv.failures.append(f"dead holds something that is not a soak job: {other}")
    unknown = [jid for jid in ctx.runs if jid not in jobs]
    for jid in unknown:
        r = ctx.runs[jid][0]
        inv.info.append(f"{jid} ({r.kind}) ran but no accepted push names it (a push that raised?)")
    return inv


def _runs_text(runs: list[Run]) -> str:
    if not runs:
        return "none"
    return ", ".join(
        f"[pid {r.pid} {clock(r.start)}-{clock(r.end) if r.end else 'cut'} rc={r.rc} oc={r.oc}"
        f" {'ok' if r.ok else 'failed' if r.ok is False else ''}]"
        for r in runs
    )


def _runs(ctx: Context, jobs: dict[str, dict[str, Any]]) -> Invariant:
    inv = Invariant("runs per job within faults")
    f = ctx.figures
    for jid, j in jobs.items():
        runs = ctx.runs.get(jid, [])
        f.runs += len(runs)
        extra = len(runs) - j["expected"]
        if extra <= 0:
            continue
        f.extra_runs += extra
        # A fault after the job settled (its first successful run ended, and its ack had
        # time to go) explains nothing: a settled job must never run again.
        settled = min((r.end for r in runs if r.ok and r.end is not None), default=None)
        touching = [
            x
            for x in ctx.journal.faults
            if (settled is None or x.start <= settled + ACK_GRACE)
            and any(touches(x, r) for r in runs)
        ]
        # Each extra run is put down to one fault: those on the job's own worker first.
        touching.sort(key=lambda x: (x.kind not in WORKER_KINDS, x.start))
        for x in touching[:extra]:
            f.extra_by_kind[x.kind] = f.extra_by_kind.get(x.kind, 0) + 1
            inv.info.append(f"{jid} ({j['kind']}) ran again after {x.describe()}")
        if extra > len(touching):
            f.extra_unexplained += extra - len(touching)
            after = (
                f" (settled at {clock(settled)}, ran again after)"
                if settled is not None and any(r.start > settled for r in runs)
                else ""
            )
            inv.failures.append(
                f"{jid} ({j['kind']}) ran {len(runs)} times, expected {j['expected']}{after}, "
                f"faults that touched it: {[x.describe() for x in touching] or 'none'}; "
                f"runs: {_runs_text(runs)}"
            )
    return inv


def _overlap(ctx: Context) -> Invariant:
    """Runs of different jobs holding one unique lock never overlap (until_executed and
    while_executing jobs per key; the until_executed periodic entry). A SIGSTOP touching
    one of the two explains it: the stop outlasts ORPHAN_THRESHOLD, so the stalled
    process is taken for dead while it runs on (docs/reliability.md), its job's copy runs
    elsewhere and releases the lock, and the entry's running lock lapses after
    PERIODIC_ACTIVE_TTL."""
    inv = Invariant("unique runs never overlap")
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for runs in ctx.runs.values():
        for r in runs:
            if r.kind in ("unique_until_executed", "unique_while_executing"):
                groups[(r.kind, r.key)].append(r)
            elif r.entry and ctx.entries.get(r.entry):
                groups[("periodic", r.entry)].append(r)
    for group, runs in groups.items():
        runs.sort(key=lambda r: r.start)
        for i, a in enumerate(runs):
            a_end = end_of(a, ctx.journal.faults) or ctx.soak_end
            for b in runs[i + 1 :]:
                if b.start >= a_end:
                    break
                if b.jid == a.jid:
                    continue
                stops = [
                    x
                    for x in ctx.journal.faults
                    if x.kind == "stop" and (touches(x, a) or touches(x, b))
                ]
                text = (
                    f"{group[0]} {group[1]}: {a.jid} [{clock(a.start)}-{clock(a_end)}] and "
                    f"{b.jid} [{clock(b.start)}-...] ran at once"
                )
                if stops:
                    inv.info.append(
                        text + f" (stalled process taken for dead: {stops[0].describe()})"
                    )
                else:
                    inv.failures.append(text)
    return inv


def _pushes_from_logs(ctx: Context):
    """From the ticker's lines: (entry, slot) -> jids pushed, and (entry, slot) -> the
    jid it named as holding the until_executed lock when it skipped that slot."""
    pushes: dict[tuple[str, int], set[str]] = defaultdict(set)
    blocked: dict[tuple[str, int], str] = {}
    for path in ctx.logs:
        data = path.read_bytes()
        for m in ENQUEUED.finditer(data):
            pushes[(m.group(1).decode(), parse_iso(m.group(2)))].add(m.group(3).decode())
        for m in BLOCKED.finditer(data):
            try:
                blocked[(m.group(1).decode(), parse_iso(m.group(2)))] = m.group(3).decode()
            except ValueError:
                continue
    return pushes, blocked


def _periodic(ctx: Context) -> list[Invariant]:
    once = Invariant("each periodic slot pushed at most once")
    none_skipped = Invariant("no periodic slot skipped")
    pushes, blocked = _pushes_from_logs(ctx)
    faults = ctx.journal.faults
    for entry, until_executed in ctx.entries.items():
        fired: dict[int, set[str]] = defaultdict(set)
        holders: list[tuple[float, float]] = []
        for jid, runs in ctx.runs.items():
            if runs[0].entry != entry or runs[0].slot is None:
                continue
            fired[int(runs[0].slot)].add(jid)
            if until_executed:
                ends = [end_of(r, faults) for r in runs]
                if any(e is None for e in ends):
                    end = ctx.soak_end
                elif runs[-1].end is None:
                    end = max(ends) + ctx.active_ttl + 1.0
                else:
                    end = max(ends)
                holders.append((float(runs[0].slot), end))
        for (name, slot), jids in pushes.items():
            if name == entry:
                fired[slot].update(jids)
        figures = {
            "fired": 0,
            "skipped": 0,
            "explained": 0,
            "twice": 0,
        }
        ctx.figures.slots[entry] = figures
        if not fired:
            none_skipped.failures.append(f"{entry}: no slot ever fired")
            continue
        figures["fired"] = len(fired)
        for slot, jids in sorted(fired.items()):
            if len(jids) < 2:
                continue
            figures["twice"] += 1
            restarts = [
                x
                for x in faults
                if x.kind == "redis_restart" and x.start - 1 <= slot <= x.stop_time + 1
            ]
            text = f"{entry}: slot {clock(slot)} pushed {len(jids)} times: {sorted(jids)}"
            if restarts:
                once.info.append(text + f" (a push's reply lost in {restarts[0].describe()})")
            else:
                once.failures.append(text)
        first, last = min(fired) + 1, int(ctx.disabled_at) - 2
        skipped = [slot for slot in range(first, last + 1) if slot not in fired]
        figures["skipped"] = len(skipped)
        # A gap of consecutive skipped slots: each slot may have its own reason; the
        # slots left without one may still be a claim cut at the gap's start.
        for gap in _consecutive(skipped):
            cut = _claim_cut(ctx, gap) if until_executed else None
            unexplained = []
            for slot in gap:
                why = _skip_reason(ctx, entry, slot, holders)
                if not why and cut is not None:
                    why = f"a claim cut by {cut.describe()} held the lock until its claim TTL"
                if why:
                    figures["explained"] += 1
                    none_skipped.info.append(f"{entry}: slot {clock(slot)} skipped: {why}")
                else:
                    unexplained.append(slot)
            for group in _consecutive(unexplained):
                none_skipped.failures.append(_skipped_text(ctx, entry, group, blocked, fired))
    return [once, none_skipped]


def _claim_cut(ctx: Context, group: list[int]) -> Fault | None:
    """A Redis restart or a SIGKILL can cut an ``until_executed`` claim from its push
    (the claim written, its reply or the push lost): the entry's running lock then has
    a job that never comes, and lapses after the claim TTL (docs/periodic.md). A gap
    that begins with such a fault and ends within the claim TTL is that."""
    claim_ttl = ctx.active_ttl + CLAIM_MARGIN
    for x in ctx.journal.faults:
        if x.kind not in ("redis_restart", "kill"):
            continue
        if (
            x.start - 1.0 <= group[0] <= x.stop_time + REDIS_GRACE + 1.0
            and group[-1] <= x.stop_time + claim_ttl + 2.0
        ):
            return x
    return None


def _consecutive(slots: list[int]) -> list[list[int]]:
    groups: list[list[int]] = []
    for s in slots:
        if groups and s == groups[-1][-1] + 1:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _skipped_text(ctx: Context, entry: str, group: list[int], blocked, fired) -> str:
    first, last = group[0], group[-1]
    span = clock(first) if first == last else f"{clock(first)} to {clock(last)} ({len(group)})"
    claims = [ctx.claimed.get((entry, s)) for s in group]
    claimed = sum(1 for c in claims if c)
    unsampled = sum(1 for c in claims if c is None)
    text = f"{entry}: slot {span} never pushed; claimed {claimed}, not claimed {len(group) - claimed - unsampled}"
    if unsampled:
        text += f", claim not sampled {unsampled}"
    # The ticker logs a blocked slot only after its grace of three beats, so with an
    # every-second entry it names the holder for few slots: look a little past the group,
    # and at the lock itself (still held after the drain?).
    holders = sorted(
        {h for (e, s), h in blocked.items() if e == entry and first - 1 <= s <= last + 30}
    )
    for key, owner, _ttl in ctx.state.running_locks:
        if key.endswith(f":running:{entry}") and owner not in holders:
            holders.append(owner)
    if holders:
        pushed = {j for jids in fired.values() for j in jids}
        fates = [
            f"{h} ({'ran' if h in ctx.runs else 'pushed, never ran' if h in pushed else 'never pushed, never ran'})"
            for h in holders
        ]
        text += f"; the ticker named the until_executed lock's holder: {', '.join(fates)}"
    near = [x.describe() for x in ctx.journal.faults if first - 10 <= x.start <= first + 1]
    return text + f"; faults in the 10 s before: {near or 'none'}"


def _skip_reason(ctx: Context, entry: str, slot: int, holders) -> str:
    for x in ctx.journal.faults:
        if x.kind in REDIS_DOWN_KINDS and x.start - 1.0 <= slot <= x.stop_time + REDIS_GRACE:
            return x.describe()
        # The entry's own keys, or the queue its runs are pushed to: a push refused as
        # WRONGTYPE is rolled back and the entry backs off (5 s) like any other failure.
        queue = ctx.entry_queues.get(entry, "")
        if x.kind == "corrupt" and (
            x.key.endswith(f":last_slot:{entry}")
            or x.key.endswith(f":running:{entry}")
            or (queue and x.key.endswith(f":queue:{queue}"))
        ):
            if x.start - 0.5 <= slot <= x.stop_time + CORRUPT_GRACE:
                return x.describe()
    for s in ctx.journal.stalls:
        if s.start - 1.0 <= slot <= s.end + 1.0:
            return f"{s.what} stalled {s.end - s.start:.1f}s at {clock(s.start)}"
    for held_from, held_to in holders:
        if held_from < slot <= held_to + 0.5:
            return f"the previous run (slot {clock(held_from)}) held the until_executed lock"
    for x in ctx.journal.faults:
        if x.kind == "kill" and slot <= x.start <= slot + 1.5 and ctx.claimed.get((entry, slot)):
            return f"{x.describe()} between the claim and the push (claimed, never pushed)"
    return ""


def _locks(ctx: Context, jobs: dict[str, dict[str, Any]]) -> Invariant:
    inv = Invariant("no lock left held")
    for kind, found in (("unique", ctx.state.unique_locks), ("running", ctx.state.running_locks)):
        for key, owner, ttl in found:
            runs = ctx.runs.get(owner, [])
            state = (
                "succeeded"
                if any(r.ok for r in runs)
                else "in dead"
                if owner in ctx.state.dead
                else f"still in {ctx.state.pending[owner]}"
                if owner in ctx.state.pending
                else "unknown to the soak"
                if owner not in jobs
                else "nowhere"
            )
            inv.failures.append(
                f"{kind} lock {key} still held by {owner} ({state}), ttl {ttl}s, after the drain"
            )
    for key in ctx.state.no_ttl:
        inv.failures.append(f"{key} has no TTL")
    return inv


def _keyguard(ctx: Context) -> Invariant:
    inv = Invariant("wrong-typed keys moved aside")
    for x in ctx.journal.faults:
        if x.kind != "corrupt":
            continue
        if x.moved_at is None or not ("moved aside" in x.detail or "replaced by" in x.detail):
            inv.failures.append(x.describe())
        else:
            inv.info.append(f"{x.describe()} after {x.moved_at - x.start:.1f}s")
    return inv


def _threads(ctx: Context) -> Invariant:
    inv = Invariant("no thread or process lost")
    for path in ctx.logs:
        for m in DIED.finditer(path.read_bytes()):
            inv.failures.append(f"{path.name}: {m.group(0).decode(errors='replace')[:300]}")
    for x in ctx.journal.faults:
        if x.kind == "term" and (x.forced or x.exit_code not in (0, None)):
            inv.failures.append(
                f"{x.describe()}: exit status {x.exit_code}"
                + (" (did not stop in time: SIGKILLed)" if x.forced else "")
            )
    for note in ctx.journal.notes:
        inv.failures.append(note)
    for name, code in ctx.stop_codes.items():
        if code != 0:
            inv.failures.append(f"{name}: final stop exit status {code} (None = did not stop)")
    return inv


def _drained(ctx: Context) -> Invariant:
    inv = Invariant("everything settled by the end")
    for jid, where in sorted(ctx.state.pending.items()):
        inv.failures.append(f"{jid} still in {where}")
    return inv


def _drained_in_time(ctx: Context) -> Invariant:
    """Time from the last fault to the drain: the faults' jobs are back and run, the
    stopped worker's finished, well within DRAIN_LIMIT (the periodic entries are
    disabled after the chaos, so their last runs count in it too)."""
    inv = Invariant(f"drained within {DRAIN_LIMIT:.0f} s of the last fault")
    f = ctx.figures
    faults = ctx.journal.faults
    if not faults:
        inv.info.append("no fault")
        return inv
    last = max(faults, key=lambda x: x.over_at)
    f.last_fault, f.last_fault_over = last.describe(), last.over_at
    if ctx.drained_at is None:
        inv.failures.append(f"not drained; the last fault: {last.describe()}")
        return inv
    f.drain_after = max(0.0, ctx.drained_at - last.over_at)
    line = f"drained at {clock(ctx.drained_at)}, {f.drain_after:.1f}s after {last.describe()}"
    (inv.failures if f.drain_after > DRAIN_LIMIT else inv.info).append(line)
    return inv
