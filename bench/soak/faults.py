"""The record of what went wrong during a soak: faults injected and stalls observed.

Each fault has a window ``[start, end]`` (epoch seconds) and, for a fault on a worker,
the pids it hit. The checker decides from these which runs a fault *touched*.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

# Fault kinds, in the order the table lists them.
KINDS = ("kill", "term", "stop", "redis_restart", "pause", "script_flush", "corrupt")
WORKER_KINDS = ("kill", "term", "stop")
# Kinds during which Redis does not answer (or answers only some commands).
REDIS_DOWN_KINDS = ("redis_restart", "pause")
# Kinds the chaos applies for a while (a worker stopped, Redis down or paused).
LASTING_KINDS = ("stop", "redis_restart", "pause")


@dataclass
class Fault:
    kind: str
    start: float
    end: float | None = None
    detail: str = ""
    worker: str = ""  # the worker's name, for worker faults
    pids: frozenset[int] = frozenset()  # the processes hit (a group: the supervisor too)
    key: str = ""  # corrupt: the key written
    wrong_type: str = ""  # corrupt: the type written
    moved_at: float | None = None  # corrupt: when the key guard moved it aside
    exit_code: int | None = None  # term: the worker's exit status
    forced: bool = False  # term: it did not exit in time and was SIGKILLed

    def finish(self, at: float | None = None) -> None:
        self.end = time.time() if at is None else at

    @property
    def stop_time(self) -> float:
        return self.end if self.end is not None else time.time()

    @property
    def over_at(self) -> float:
        """When the chaos stopped applying it: a stop, a Redis restart and a pause last
        (until their end); a kill, a TERM, a script flush and a wrong-typed key are one
        act (their start), and what follows them, a TERMed worker's shutdown or the key
        guard's move, is the fleet's own recovery (the drain's time counts it)."""
        return self.stop_time if self.kind in LASTING_KINDS else self.start

    def describe(self) -> str:
        where = f" {self.worker}" if self.worker else ""
        span = f"{self.stop_time - self.start:.1f}s" if self.end else "open"
        extra = f" {self.detail}" if self.detail else ""
        return f"{self.kind}{where} at {_clock(self.start)} ({span}){extra}"


@dataclass
class Stall:
    """This host (the soak's own threads) or Redis answering late, outside any fault."""

    what: str  # "host" or "redis"
    start: float
    end: float


@dataclass
class Journal:
    faults: list[Fault] = field(default_factory=list)
    stalls: list[Stall] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # unexpected events, for the report
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, fault: Fault) -> Fault:
        with self.lock:
            self.faults.append(fault)
        return fault

    def note(self, text: str) -> None:
        with self.lock:
            self.notes.append(f"{_clock(time.time())} {text}")

    def redis_disturbed(self, at: float, margin: float = 0.0) -> bool:
        """Whether a Redis-side fault was under way at ``at``."""
        with self.lock:
            return any(
                f.kind in REDIS_DOWN_KINDS and f.start - margin <= at <= f.stop_time + margin
                for f in self.faults
            )


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


clock = _clock
