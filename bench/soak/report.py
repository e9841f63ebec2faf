"""The table a soak prints at the end."""

from __future__ import annotations

from collections import Counter

from .check import Figures, Invariant
from .faults import KINDS, Journal

DETAILS_SHOWN = 15


def table(
    seconds: float,
    seed: int,
    journal: Journal,
    figures: Figures,
    invariants: list[Invariant],
    workdir: str,
    boot_refusals: int,
) -> str:
    out: list[str] = []
    add = out.append
    counts = Counter(f.kind for f in journal.faults)
    add("")
    add(f"soak: {seconds:.0f} s of chaos, seed {seed}; logs and traces in {workdir}")
    add("")
    add("faults injected")
    for kind in KINDS:
        add(f"  {kind:<14}{counts.get(kind, 0):>6}")
    add(f"  {'total':<14}{sum(counts.values()):>6}")
    stalls = journal.stalls
    longest = max((s.end - s.start for s in stalls), default=0.0)
    add(
        f"  stalls seen (host or Redis late > 0.5 s outside faults): {len(stalls)}"
        + (f", longest {longest:.1f} s" if stalls else "")
    )
    if boot_refusals:
        add(f"  workers that refused to start while Redis was away: {boot_refusals}")
    add("")
    f = figures
    add("jobs")
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(f.by_kind.items()))
    add(f"  jobs            {f.jobs:>7}   ({kinds})")
    add(f"  refused dups    {f.duplicates_refused:>7}   (unique jobs whose lock was held)")
    add(
        f"  enqueue errors  {f.enqueue_errors:>7}   ({f.errors_that_ran} of them had reached Redis and ran)"
    )
    add(f"  runs            {f.runs:>7}")
    by = ", ".join(f"{k} {n}" for k, n in sorted(f.extra_by_kind.items())) or "-"
    add(f"  extra runs      {f.extra_runs:>7}   (after: {by}; unexplained {f.extra_unexplained})")
    add(f"  succeeded       {f.succeeded:>7}")
    reasons = ", ".join(f"{k} {n}" for k, n in sorted(f.dead_reasons.items()))
    add(f"  dead            {f.dead:>7}" + (f"   ({reasons})" if reasons else ""))
    add(f"  not finished    {f.pending:>7}")
    add(f"  lost            {f.lost:>7}")
    add("")
    add("periodic slots (after each entry's first)")
    for entry, s in f.slots.items():
        add(
            f"  {entry:<14} fired {s['fired']:>6}   skipped {s['skipped']:>4} "
            f"(explained {s['explained']}, unexplained {s['skipped'] - s['explained']})   "
            f"pushed twice {s['twice']}"
        )
    add("")
    if f.last_fault:
        after = (
            "not drained" if f.drain_after is None else f"drained {f.drain_after:.1f} s after it"
        )
        add(f"drain: {after}; the last fault: {f.last_fault}")
        add("")
    add("invariants")
    for inv in invariants:
        add(f"  {'PASS' if inv.passed else 'FAIL'}  {inv.name}")
        for line in inv.failures[:DETAILS_SHOWN]:
            add(f"          {line}")
        if len(inv.failures) > DETAILS_SHOWN:
            add(f"          ... and {len(inv.failures) - DETAILS_SHOWN} more (see report.txt)")
    passed = sum(1 for i in invariants if i.passed)
    add("")
    add(f"{passed} passed, {len(invariants) - passed} failed")
    return "\n".join(out)


def details(journal: Journal, invariants: list[Invariant]) -> str:
    """Everything, for report.txt in the soak's directory."""
    out = ["faults"]
    out += [f"  {f.describe()}" for f in journal.faults]
    out.append("stalls")
    out += [
        f"  {s.what} {s.start:.3f}-{s.end:.3f} ({s.end - s.start:.1f}s)" for s in journal.stalls
    ]
    out.append("notes")
    out += [f"  {n}" for n in journal.notes]
    for inv in invariants:
        out.append(f"{'PASS' if inv.passed else 'FAIL'} {inv.name}")
        out += [f"  FAIL {line}" for line in inv.failures]
        out += [f"  info {line}" for line in inv.info]
    return "\n".join(out) + "\n"
