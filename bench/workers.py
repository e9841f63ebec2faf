"""Worker subprocesses: start them, notice when one dies, stop them and everything they forked.

Each worker starts in its own session (so its own process group): Dramatiq's worker
process and RQ's work horses are children of the command we start, and stopping the
group catches them too. Nothing is left running: ``stop`` waits until the group is
gone, escalating from SIGTERM to SIGKILL, and an ``atexit`` hook stops any group that
an exception or Ctrl-C left behind.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# Long enough for every peer's warm shutdown of an idle worker (Dramatiq's consumers
# wake up at most once a second); after that SIGKILL.
GRACE_SECONDS = 15.0
# After SIGKILL the kernel needs a moment to reap; waiting longer means something is wrong.
KILL_WAIT_SECONDS = 5.0

_live: set[WorkerGroup] = set()


@dataclass(frozen=True, kw_only=True)
class StopInfo:
    seconds: float  # from SIGTERM until no process of the group is left
    killed: bool  # SIGKILL was needed


class WorkerGroup:
    """The worker processes of one run (``--processes`` of them)."""

    def __init__(self, argvs: list[list[str]], *, env: dict[str, str], cwd: Path, log_dir: Path):
        self.argvs = argvs
        self.env = env
        self.cwd = cwd
        self.log_paths = [log_dir / f"worker-{i}.log" for i in range(len(argvs))]
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        _live.add(self)
        for argv, log_path in zip(self.argvs, self.log_paths, strict=True):
            with open(log_path, "wb") as log:
                self.procs.append(
                    subprocess.Popen(
                        argv,
                        cwd=self.cwd,
                        env=self.env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def exited(self) -> str | None:
        """A description of the first worker that has exited, or None while all run."""
        for proc, log_path in zip(self.procs, self.log_paths, strict=False):
            code = proc.poll()
            if code is not None:
                return f"worker exited with code {code}; last log lines:\n{tail(log_path)}"
        return None

    def stop(self) -> StopInfo:
        start = time.perf_counter()
        for proc in self.procs:
            _signal_leader(proc, signal.SIGTERM)
        deadline = start + GRACE_SECONDS
        killed = False
        while any(_group_alive(proc.pid) for proc in self.procs):
            _reap(self.procs)
            if time.perf_counter() > deadline:
                if not killed:
                    for proc in self.procs:
                        _signal_group(proc.pid, signal.SIGKILL)
                    killed = True
                    deadline = time.perf_counter() + KILL_WAIT_SECONDS
                else:
                    pids = [p.pid for p in self.procs if _group_alive(p.pid)]
                    raise RuntimeError(f"worker process groups {pids} survived SIGKILL")
            time.sleep(0.02)
        _reap(self.procs)
        _live.discard(self)
        return StopInfo(seconds=time.perf_counter() - start, killed=killed)


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _signal_leader(proc: subprocess.Popen, sig: int) -> None:
    # Only the command we started: each peer forwards TERM to its own children, and a
    # child that got TERM twice (Dramatiq, Celery) may skip its warm shutdown.
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.poll()


@atexit.register
def _stop_leftovers() -> None:
    for group in list(_live):
        try:
            group.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            for proc in group.procs:
                _signal_group(proc.pid, signal.SIGKILL)
