"""Each run of a soak job appends lines to ``$SOAK_TRACE_DIR/<pid>.jsonl``.

A run writes a ``start`` line before its body and an ``end`` line after it (``ok`` true
or false). The file is written with one ``os.write`` per line on an ``O_APPEND`` file,
so lines from several threads never interleave and a SIGKILL loses nothing already
written. The trace does not go through Redis: the chaos soak breaks Redis on purpose,
and a run's record must not depend on it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from cogworker_django import current_job

_lock = threading.Lock()
_fd: tuple[int, int] | None = None  # (pid, fd): a forked child opens its own file


def _file() -> int | None:
    global _fd
    directory = os.environ.get("SOAK_TRACE_DIR")
    if not directory:
        return None
    pid = os.getpid()
    with _lock:
        if _fd is None or _fd[0] != pid:
            path = os.path.join(directory, f"{pid}.jsonl")
            _fd = (pid, os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        return _fd[1]


def write(event: str, kind: str, **fields: Any) -> None:
    fd = _file()
    if fd is None:
        return
    job = current_job() or {}
    record = {
        "e": event,
        "t": time.time(),
        "kind": kind,
        "jid": job.get("jid"),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "rc": job.get("retry_count") or 0,
        "oc": job.get("orphan_count") or 0,
        **fields,
    }
    if "periodic" in job:
        record["entry"] = job["periodic"]
        record["slot"] = job.get("periodic_slot")
    os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())


class run:
    """``with trace.run(kind, token=...):`` writes start, then end with ok true/false."""

    def __init__(self, kind: str, **fields: Any) -> None:
        self.kind = kind
        self.fields = fields

    def __enter__(self) -> None:
        write("start", self.kind, **self.fields)

    def __exit__(self, exc_type, exc, tb) -> None:
        write("end", self.kind, ok=exc_type is None, **self.fields)
