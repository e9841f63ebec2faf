"""BullMQ (Node): ``node bench/peer_tasks/bullmq/bench.js worker C``, one process whose
event loop runs up to C jobs at once; each job's completion (``moveToFinished``) also
fetches the next one.

BullMQ moves a job it runs into its ``active`` list, so with ``--job noop`` "done" is
exact. Bulk enqueue is ``Queue.addBulk``, 1,000 jobs a call. Rows: concurrency C, and 50
when C is lower (BullMQ's jobs are promises, not threads: it is usually run wider). Its
packages are installed by ``make bench`` into bench/peer_tasks/bullmq/node_modules
(``npm install`` there); without ``node`` or them it is skipped.
"""

from __future__ import annotations

import json
import shutil

from bench.clock import DrainResult, Probe, RunSpec, repo_root
from bench.clock import drain as _drain
from bench.external import timed_enqueue
from bench.targets import DONE_KEY, QUEUE, url_for

NAME = "bullmq"
DIR = repo_root() / "bench" / "peer_tasks" / "bullmq"
WIDE = 50

_KEY = f"bull:{QUEUE}"

PROBE = Probe(
    pending=lambda r: r.llen(f"{_KEY}:wait"),
    inflight=lambda r: r.llen(f"{_KEY}:active"),
    failed=lambda r: r.zcard(f"{_KEY}:failed"),
)


def probe(spec: RunSpec) -> Probe:
    return PROBE


def _node() -> str:
    node = shutil.which("node")
    if not node:
        raise ImportError("no node on PATH")
    return node


def version() -> str:
    _node()
    manifest = DIR / "node_modules" / "bullmq" / "package.json"
    if not manifest.exists():
        raise ImportError(f"bullmq is not installed: npm install --prefix {DIR}")
    return json.loads(manifest.read_text())["version"]


def configs(opts) -> list[tuple[str, str, dict]]:
    widths = [opts.concurrency] + ([WIDE] if opts.concurrency < WIDE else [])
    return [
        ("" if c == opts.concurrency else f"c{c}", f"concurrency {c}", {"concurrency": c})
        for c in widths
    ]


def _env() -> dict[str, str]:
    return {"BENCH_BULLMQ_URL": url_for(NAME), "BENCH_DONE_KEY": DONE_KEY, "BENCH_QUEUE": QUEUE}


def enqueue(n: int, spec: RunSpec) -> float:
    argv = [_node(), str(DIR / "bench.js"), "enqueue", spec.job, str(n)]
    return timed_enqueue(argv, _env(), timeout=spec.timeout)


def drain(n: int, spec: RunSpec) -> DrainResult:
    node = _node()

    def argv(i: int) -> list[str]:
        return [node, str(DIR / "bench.js"), "worker", str(spec.params["concurrency"])]

    return _drain(n, spec, argv=argv, env=_env(), probe=PROBE)
