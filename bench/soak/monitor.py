"""Watching the soak from the side: stalls of this host or of Redis that no fault
explains (an every-second slot can't fire when nothing gets to run for a second), and
workers that exit by themselves."""

from __future__ import annotations

import threading
import time

import redis

from .faults import Journal, Stall
from .fleet import Fleet
from .procs import RedisServer

STALL = 0.5  # seconds late that count as a stall


class Monitor:
    def __init__(self, fleet: Fleet, server: RedisServer, journal: Journal) -> None:
        self.fleet = fleet
        self.server = server
        self.journal = journal
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        # (entry, slot) -> seen: per-slot locks of periodic entries, sampled every 0.5 s
        # (each lives a minute), to tell a slot never claimed from one claimed and not
        # pushed.
        self.claimed: dict[tuple[str, int], bool] = {}
        self.prefix = "soak"
        self.entries: list[str] = []

    def start(self) -> None:
        for target, name in (
            (self._host, "stall-host"),
            (self._redis, "stall-redis"),
            (self._exits, "exits"),
            (self._claims, "claims"),
        ):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stopping.set()
        for t in self._threads:
            t.join(10)

    def _host(self) -> None:
        step = 0.1
        while not self._stopping.is_set():
            t0 = time.time()
            time.sleep(step)
            late = time.time() - t0 - step
            if late > STALL:
                self._stall("host", t0 + step, time.time())

    def _redis(self) -> None:
        conn: redis.Redis | None = None
        while not self._stopping.wait(0.25):
            t0 = time.time()
            if self.journal.redis_disturbed(t0, margin=1.0):
                conn = None
                continue
            try:
                if conn is None:
                    conn = self.server.client(timeout=5)
                conn.ping()
            except redis.RedisError:
                conn = None
                continue
            took = time.time() - t0
            if took > STALL and not self.journal.redis_disturbed(t0, margin=1.0):
                self._stall("redis", t0, t0 + took)

    def _claims(self) -> None:
        lock_prefix = f"{self.prefix}:periodic:lock:"
        conn: redis.Redis | None = None
        while not self._stopping.wait(0.5):
            try:
                if conn is None:
                    conn = self.server.client(timeout=5)
                now = int(time.time())
                found = set()
                for key in conn.scan_iter(match=lock_prefix + "*", count=1000):
                    entry, _, slot = key.decode()[len(lock_prefix) :].rpartition(":")
                    found.add((entry, int(slot)))
            except (redis.RedisError, ValueError):
                conn = None
                continue
            for key in found:
                self.claimed[key] = True
            # Slots of the last 50 s not seen: not claimed (their lock lives 61 s).
            for entry in self.entries:
                for slot in range(now - 50, now - 1):
                    self.claimed.setdefault((entry, slot), False)

    def _exits(self) -> None:
        while not self._stopping.wait(0.5):
            try:
                self.fleet.refresh_children()
                self.fleet.check_exits(
                    lambda since: (
                        self.journal.redis_disturbed(since, margin=10.0)
                        or self.journal.redis_disturbed(time.time(), margin=10.0)
                    )
                )
            except Exception as exc:  # noqa: BLE001 - keep watching
                self.journal.note(f"monitor: {exc!r}")

    def _stall(self, what: str, start: float, end: float) -> None:
        with self.journal.lock:
            self.journal.stalls.append(Stall(what, start, end))
