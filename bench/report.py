"""Results: one record per run, medians per configuration, the markdown table, the JSON."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

NUMERIC = ["enqueue_s", "enqueue_per_s", "startup_s", "drain_s", "wall_s", "jobs_per_s"]


def record(*, key, system, config, run, jobs, enqueue_s=None, drain=None, error=None) -> dict:
    rec = {
        "key": key,
        "system": system,
        "config": config,
        "run": run,
        "jobs": jobs,
        "status": "ok",
        "enqueue_s": enqueue_s,
        "enqueue_per_s": jobs / enqueue_s if enqueue_s else None,
        "startup_s": None,
        "drain_s": None,
        "wall_s": None,
        "jobs_per_s": None,
        "failed": None,
        "remaining": None,
        "stop_s": None,
        "killed": None,
        "detail": "",
    }
    if drain is not None:
        rec.update(
            status=drain.status,
            startup_s=drain.startup_s,
            drain_s=drain.drain_s,
            wall_s=drain.wall_s,
            jobs_per_s=jobs / drain.drain_s if drain.status == "ok" and drain.drain_s else None,
            failed=drain.failed,
            remaining=drain.remaining,
            stop_s=drain.stop_s,
            killed=drain.killed,
            detail=drain.detail,
        )
    if error is not None:
        rec.update(status="error", detail=error)
    return rec


def skipped(*, system: str, reason: str) -> dict:
    return {"key": system, "system": system, "config": reason, "status": "skipped"}


def summarize(records: list[dict], baseline: str) -> list[dict]:
    """Median of each number over a configuration's successful runs, plus the ratio."""
    groups: dict[str, list[dict]] = {}
    for rec in records:
        groups.setdefault(rec["key"], []).append(rec)
    rows = []
    for runs in groups.values():
        row = dict(runs[0])
        ok = [r for r in runs if r["status"] == "ok"]
        row["runs"] = len(runs)
        row["ok_runs"] = len(ok)
        if runs[0]["status"] != "skipped":
            for name in NUMERIC:
                values = [r[name] for r in ok if r.get(name) is not None]
                row[name] = statistics.median(values) if values else None
            if not ok:
                row["status"] = runs[-1]["status"]
            row["failed"] = max((r["failed"] or 0) for r in runs) if runs else None
        rows.append(row)
    base = next((r for r in rows if r["key"] == baseline and r.get("jobs_per_s")), None)
    for row in rows:
        rate = row.get("jobs_per_s")
        row["ratio"] = rate / base["jobs_per_s"] if base and rate else None
    return rows


def table(rows: list[dict], baseline: str) -> str:
    head = [
        "system", "config", "jobs", "enqueue s", "enqueue jobs/s",
        "startup s", "drain s", "jobs/s", f"ratio vs {baseline}",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r["status"] == "skipped":
            cells = [r["system"], r["config"]] + ["-"] * (len(head) - 2)
        else:
            rate = _num(r.get("jobs_per_s"), 0) if r.get("jobs_per_s") else r["status"]
            cells = [
                r["system"],
                r["config"] + (f" (median of {r['ok_runs']})" if r.get("runs", 1) > 1 else ""),
                str(r["jobs"]),
                _num(r.get("enqueue_s"), 3),
                _num(r.get("enqueue_per_s"), 0),
                _num(r.get("startup_s"), 3),
                _num(r.get("drain_s"), 3),
                rate,
                f"{r['ratio']:.2f}x" if r.get("ratio") else "n/a",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The systems cogworker's goals are set against (docs/performance.md): its ratio to each
# is printed as a line of its own.
ANCHORS = ("sidekiq", "bullmq")


def notes(rows: list[dict], baseline: str) -> list[str]:
    out = []
    if not any(r["key"] == baseline and r.get("jobs_per_s") for r in rows):
        out.append(f"No ratio: the baseline {baseline} did not run (choose one with --baseline).")
    for r in rows:
        if r["system"] in ANCHORS and r.get("ratio") and r["key"] != baseline:
            out.append(f"{baseline} drains at {1 / r['ratio']:.2f}x {r['key']} ({r['config']}).")
    for r in rows:
        if r["status"] not in ("ok", "skipped"):
            out.append(f"{r['key']}: {r['status']}: {r['detail']}".rstrip())
        if r.get("failed"):
            out.append(f"{r['key']}: {r['failed']} jobs ended up failed/retrying/dead.")
    return out


def write_json(path: str, *, machine: dict, params: dict, records: list, rows: list) -> None:
    data = {"machine": machine, "params": params, "runs": records, "summary": rows}
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def _num(value, digits: int) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"
