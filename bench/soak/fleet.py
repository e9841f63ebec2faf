"""Three worker slots, one of them running ``--processes 2``; replacements on demand."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

from .faults import Fault, Journal
from .procs import Worker, wait_until

SLOTS = 3
MULTI_SLOT = 0  # this slot's worker runs --processes 2
UNREACHABLE = b"is unreachable"
# A worker counts as healthy this long after its start: its ticker and recovery wait
# for its first beats.
BOOT_SETTLE = 5.0


class Fleet:
    def __init__(self, env: dict, logdir: Path, journal: Journal, shutdown_timeout: float):
        self.env = env
        self.logdir = logdir
        self.journal = journal
        self.shutdown_timeout = shutdown_timeout
        self.slots: list[Worker | None] = [None] * SLOTS
        self.every: list[Worker] = []  # every worker ever started, for attribution and cleanup
        self.boot_refusals = 0  # workers that exited at start because Redis was away
        self._generation = 0
        self._lock = threading.RLock()
        self._reapers: list[threading.Thread] = []
        self._failures: dict[int, int] = {}  # slot -> workers in a row that exited early
        self._respawn_at: dict[int, float] = {}  # slot -> when to start its next worker

    # Starting ----------------------------------------------------------------------------

    def args(self, slot: int) -> list[str]:
        args = ["--tag", f"soak{slot}"]
        if slot == MULTI_SLOT:
            args += ["--processes", "2"]
        return args

    def expected_boots(self, worker: Worker) -> int:
        return 2 if worker.slot == MULTI_SLOT else 1

    def start(self, slot: int) -> Worker:
        with self._lock:
            self._generation += 1
            worker = Worker(slot, self._generation, self.args(slot), self.env, self.logdir)
            worker.start()
            self.slots[slot] = worker
            self.every.append(worker)
            return worker

    def start_all(self, timeout: float = 120.0) -> None:
        for slot in range(SLOTS):
            self.start(slot)
        if not wait_until(lambda: all(self.booted(w) for w in self.current()), timeout, 0.2):
            raise RuntimeError(
                f"the workers did not start within {timeout:.0f}s; see {self.logdir}"
            )

    def booted(self, worker: Worker) -> bool:
        return worker.alive() and worker.booted_count() >= self.expected_boots(worker)

    # Looking -----------------------------------------------------------------------------

    def current(self) -> list[Worker]:
        with self._lock:
            return [w for w in self.slots if w is not None]

    def healthy(self) -> list[Worker]:
        """In the fleet, running (not SIGSTOPped) and fully booted."""
        now = time.time()
        return [
            w
            for w in self.current()
            if not w.stopped and self.booted(w) and now - w.started_at >= BOOT_SETTLE
        ]

    def owner_of(self, pid: int, ppid: int | None = None) -> Worker | None:
        for w in self.every:
            if pid in w.pids or (ppid is not None and ppid in w.pids and ppid != 1):
                return w
        return None

    def refresh_children(self) -> None:
        for w in self.current():
            if w.slot == MULTI_SLOT:
                w.children()

    # Faults ------------------------------------------------------------------------------

    def retire(self, worker: Worker) -> Worker:
        """Take ``worker`` out of its slot and start its replacement."""
        with self._lock:
            worker.retired = True
            return self.start(worker.slot)

    def reap(self, worker: Worker, fault: Fault) -> None:
        """In the background: wait for a TERMed worker to exit; SIGKILL it if it takes
        longer than its shutdown timeout plus a margin (recorded on the fault)."""

        def wait() -> None:
            assert worker.proc is not None
            limit = self.shutdown_timeout + 30
            try:
                fault.exit_code = worker.proc.wait(limit)
            except subprocess.TimeoutExpired:
                fault.forced = True
                worker.signal_group(signal.SIGKILL)
                fault.exit_code = worker.proc.wait(10)
                self.journal.note(
                    f"{worker.name} did not exit within {limit:.0f}s of SIGTERM; SIGKILLed"
                )
            # Children of a supervisor exit with it; any left are killed with the group.
            worker.signal_group(signal.SIGKILL)
            fault.finish()
            worker.close()

        t = threading.Thread(target=wait, name=f"reap-{worker.name}", daemon=True)
        t.start()
        self._reapers.append(t)

    def wait_reaped(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self._reapers:
            t.join(max(0.0, deadline - time.monotonic()))

    def check_exits(self, redis_down_recently) -> None:
        """A worker of the fleet that exited by itself is noted and replaced. One that
        refused to start because Redis was away (the command checks Redis first) is
        only counted."""
        with self._lock:
            self._check_exits(redis_down_recently)

    def _check_exits(self, redis_down_recently) -> None:
        for w in self.current():
            if w.retired or w.alive():
                continue
            code = w.proc.returncode if w.proc else None
            tail = w.log_bytes()[-2000:]
            if UNREACHABLE in tail and redis_down_recently(w.started_at):
                self.boot_refusals += 1
            else:
                self.journal.note(
                    f"{w.name} (pid {w.pid}) exited by itself with {code}; see {w.log_path}"
                )
            w.retired = True
            w.signal_group(signal.SIGKILL)
            w.close()
            # A worker that can't boot (a broken checkout) would otherwise be respawned
            # twice a second: wait 1, 2, 4 ... 30 s between attempts in that slot.
            quick = time.time() - w.started_at < 30
            self._failures[w.slot] = self._failures.get(w.slot, 0) + 1 if quick else 0
            self.slots[w.slot] = None
            self._respawn_at[w.slot] = time.time() + min(30.0, 2.0 ** self._failures[w.slot] / 2)
        for slot, at in list(self._respawn_at.items()):
            if time.time() >= at:
                del self._respawn_at[slot]
                self.start(slot)

    # Ending ------------------------------------------------------------------------------

    def stop_all(self, timeout: float) -> dict[str, int | None]:
        """TERM every worker of the fleet; returns name -> exit code (None: SIGKILLed)."""
        workers = [w for w in self.current() if w.alive()]
        for w in workers:
            if w.stopped:
                w.signal_group(signal.SIGCONT)
                w.stopped = False
            assert w.proc is not None
            w.proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + timeout
        for w in workers:
            assert w.proc is not None
            try:
                codes[w.name] = w.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[w.name] = None
        return codes

    def kill_all(self) -> None:
        """Cleanup: SIGKILL every process group the soak started (orphaned children too)."""
        for w in self.every:
            if w.stopped:
                w.signal_group(signal.SIGCONT)
            w.signal_group(signal.SIGKILL)
            if w.proc is not None:
                try:
                    w.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            w.close()
