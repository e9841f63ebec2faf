"""The chaos thread: one fault at a time, at random intervals, of every kind in turn
(each round of the kinds is shuffled), so a short run still sees each kind."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any

import redis

from .faults import KINDS, Fault, Journal
from .fleet import MULTI_SLOT, Fleet
from .procs import RedisServer

STOP_SECONDS = 30.0
TYPES = ("string", "hash", "list", "set", "zset")

# Writes a value of type ARGV[2] at KEYS[1] (replacing what is there), unless ARGV[1]
# is "absent" and the key exists: keys that hold jobs or the only record of something
# are corrupted only while empty, so the soak never destroys data itself.
CORRUPT_LUA = """
if ARGV[1] == 'absent' and redis.call('exists', KEYS[1]) == 1 then return 0 end
redis.call('del', KEYS[1])
local t, v = ARGV[2], ARGV[3]
if t == 'string' then redis.call('set', KEYS[1], v)
elseif t == 'hash' then redis.call('hset', KEYS[1], 'soak', v)
elseif t == 'list' then redis.call('rpush', KEYS[1], v)
elseif t == 'set' then redis.call('sadd', KEYS[1], v)
else redis.call('zadd', KEYS[1], 0, v) end
return 1
"""


def corrupt_candidates(conn: redis.Redis, prefix: str, queues: list[str], entries: list[str]):
    """(key, its type, "overwrite" or "absent") for the keys of the data model the key
    guard watches (docs/internals.md, keyguard.py)."""
    p = prefix
    out = [
        (f"{p}:queues", "set", "overwrite"),
        (f"{p}:processes", "set", "overwrite"),
        (f"{p}:last_beat", "hash", "overwrite"),
        (f"{p}:live_queues", "zset", "overwrite"),
        (f"{p}:periodic:schedule", "hash", "overwrite"),
        (f"{p}:periodic:disabled", "set", "absent"),
        (f"{p}:stat:processed", "string", "overwrite"),
        (f"{p}:stat:failed", "string", "overwrite"),
        (f"{p}:history", "stream", "overwrite"),
        (f"{p}:paused", "set", "absent"),
        (f"{p}:schedule", "zset", "absent"),
        (f"{p}:retry", "zset", "absent"),
        (f"{p}:dead", "zset", "absent"),
        (f"{p}:inprogress_ids", "set", "absent"),
        (f"{p}:unsettled", "list", "absent"),
    ]
    for q in queues:
        out.append((f"{p}:queue:{q}", "list", "absent"))
        out.append((f"{p}:pqueue:{q}", "zset", "absent"))
    for e in entries:
        out.append((f"{p}:periodic:last_slot:{e}", "string", "overwrite"))
        out.append((f"{p}:periodic:running:{e}", "string", "absent"))
    for ident in conn.smembers(f"{p}:processes"):
        ident = ident.decode(errors="replace")
        out.append((f"{p}:process:{ident}", "hash", "overwrite"))
        out.append((f"{p}:work:{ident}", "hash", "overwrite"))
    for ident in conn.smembers(f"{p}:inprogress_ids"):
        ident = ident.decode(errors="replace")
        out.append((f"{p}:inprogress:{ident}", "list", "absent"))
    return out


class Chaos:
    def __init__(
        self,
        *,
        fleet: Fleet,
        server: RedisServer,
        journal: Journal,
        rng: random.Random,
        prefix: str,
        queues: list[str],
        entries: list[str],
        gap: tuple[float, float],
        ends_at: float,
        watch_limit: float = 60.0,
    ) -> None:
        self.fleet = fleet
        self.server = server
        self.journal = journal
        self.rng = rng
        self.prefix = prefix
        self.queues = queues
        self.entries = entries
        self.gap = gap
        self.ends_at = ends_at
        # How long a wrong-typed key may wait for the key guard to move it aside.
        self.watch_limit = watch_limit
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._round: list[str] = []
        self._stop_timer: threading.Timer | None = None
        self._stopped_fault: Fault | None = None
        self._stop_lock = threading.Lock()
        self._watchers: list[threading.Thread] = []
        self._marker = 0
        self.error: BaseException | None = None

    # Lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop injecting; the fault under way ends first; a stopped worker resumes."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(120)
        self.resume_stopped()
        for t in self._watchers:
            t.join(self.watch_limit + 10)

    def halt(self) -> None:
        """At cleanup: stop at once (after the fault under way, at most a Redis restart)
        and resume a stopped worker, so that it can be killed."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(45)
        self.resume_stopped()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                if self._stopping.wait(self.rng.uniform(*self.gap)):
                    return
                if time.time() >= self.ends_at:
                    return
                self.inject_next()
        except BaseException as exc:  # noqa: BLE001 - reported by the soak as its own failure
            self.error = exc
            self.journal.note(f"chaos thread failed: {exc!r}")

    def inject_next(self) -> None:
        # Try the kinds of this round in order; one that can't happen now (no worker to
        # spare, nothing to corrupt) waits for the next pick.
        if not self._round:
            self._round = list(KINDS)
            self.rng.shuffle(self._round)
        for i, kind in enumerate(self._round):
            if getattr(self, f"_{kind}")():
                del self._round[i]
                return

    # Worker faults -----------------------------------------------------------------------

    def _target(self) -> Any:
        """A healthy worker whose loss leaves another healthy one, or None."""
        healthy = self.fleet.healthy()
        if len(healthy) < 2:
            return None
        return self.rng.choice(healthy)

    def _kill(self) -> bool:
        worker = self._target()
        if worker is None:
            return False
        now = time.time()
        kids = worker.children() if worker.slot == MULTI_SLOT else []
        if kids and self.rng.random() < 0.5:
            # One child of the supervisor: it starts a replacement itself.
            child = self.rng.choice(kids)
            fault = self.journal.add(
                Fault(
                    "kill",
                    now,
                    worker=worker.name,
                    pids=frozenset([child]),
                    detail=f"child pid {child} (the supervisor replaces it)",
                )
            )
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
            fault.finish()
            return True
        fault = self.journal.add(
            Fault(
                "kill",
                now,
                worker=worker.name,
                pids=frozenset(worker.pids | set(kids)),
                detail=f"pid {worker.pid}" + (" and its children" if kids else ""),
            )
        )
        self.fleet.retire(worker)  # out of the fleet first: its exit is no surprise
        worker.signal_group(signal.SIGKILL)
        fault.finish()
        return True

    def _term(self) -> bool:
        worker = self._target()
        if worker is None:
            return False
        kids = worker.children() if worker.slot == MULTI_SLOT else []
        group = bool(kids) and self.rng.random() < 0.5
        fault = self.journal.add(
            Fault(
                "term",
                time.time(),
                worker=worker.name,
                pids=frozenset(worker.pids | set(kids)),
                detail=f"pid {worker.pid}" + (" (whole group)" if group else ""),
            )
        )
        self.fleet.retire(worker)
        if group:
            worker.signal_group(signal.SIGTERM)
        else:
            worker.proc.send_signal(signal.SIGTERM)
        self.fleet.reap(worker, fault)
        return True

    def _stop(self) -> bool:
        with self._stop_lock:
            if self._stopped_fault is not None:
                return False
        worker = self._target()
        if worker is None:
            return False
        seconds = min(STOP_SECONDS, max(1.0, self.ends_at - time.time()))
        kids = worker.children() if worker.slot == MULTI_SLOT else []
        fault = self.journal.add(
            Fault(
                "stop",
                time.time(),
                worker=worker.name,
                pids=frozenset(worker.pids | set(kids)),
                detail=f"pid {worker.pid} for {seconds:.0f}s",
            )
        )
        worker.stopped = True
        worker.signal_group(signal.SIGSTOP)
        with self._stop_lock:
            self._stopped_fault = fault
            self._stopped_worker = worker
            self._stop_timer = threading.Timer(seconds, self.resume_stopped)
            self._stop_timer.daemon = True
            self._stop_timer.start()
        return True

    def resume_stopped(self) -> None:
        with self._stop_lock:
            fault, self._stopped_fault = self._stopped_fault, None
            if self._stop_timer is not None:
                self._stop_timer.cancel()
                self._stop_timer = None
            if fault is None:
                return
            worker = self._stopped_worker
            worker.signal_group(signal.SIGCONT)
            worker.stopped = False
            fault.finish()

    # Redis faults ------------------------------------------------------------------------

    def _redis_restart(self) -> bool:
        down = self.rng.uniform(0.5, 4.0)
        fault = self.journal.add(Fault("redis_restart", time.time(), detail=f"down {down:.1f}s"))
        self.server.stop()
        time.sleep(down)
        self.server.start()
        fault.finish()
        return True

    def _pause(self) -> bool:
        seconds = self.rng.uniform(1.0, 6.0)
        mode = self.rng.choice(["ALL", "WRITE"])
        fault = self.journal.add(Fault("pause", time.time(), detail=f"{mode} {seconds:.1f}s"))
        with self.server.client() as c:
            c.execute_command("CLIENT", "PAUSE", int(seconds * 1000), mode)
        time.sleep(seconds)
        fault.finish()
        return True

    def _script_flush(self) -> bool:
        mode = self.rng.choice(["SYNC", "ASYNC"])
        fault = self.journal.add(Fault("script_flush", time.time(), detail=mode))
        with self.server.client() as c:
            c.execute_command("SCRIPT", "FLUSH", mode)
        fault.finish()
        return True

    def _corrupt(self) -> bool:
        with self.server.client() as c:
            candidates = corrupt_candidates(c, self.prefix, self.queues, self.entries)
            self.rng.shuffle(candidates)
            script = c.register_script(CORRUPT_LUA)
            for key, right, how in candidates[:12]:
                wrong = self.rng.choice([t for t in TYPES if t != right])
                self._marker += 1
                marker = f"soak-corrupt-{self._marker}"
                now = time.time()
                if script(keys=[key], args=[how, wrong, marker]):
                    fault = self.journal.add(
                        Fault(
                            "corrupt",
                            now,
                            key=key,
                            wrong_type=wrong,
                            detail=f"{key} as {wrong} (must be {right})",
                        )
                    )
                    t = threading.Thread(
                        target=self._watch,
                        args=(fault, marker, self.watch_limit),
                        name="corrupt-watch",
                        daemon=True,
                    )
                    t.start()
                    self._watchers.append(t)
                    return True
        return False

    def _watch(self, fault: Fault, marker: str, limit: float = 60.0) -> None:
        """Wait for the key guard to move the wrong-typed key aside (a copy under
        ``P:quarantine:<key>:`` holds the marker)."""
        deadline = time.time() + limit
        pattern = f"{self.prefix}:quarantine:{fault.key}:*"
        while time.time() < deadline:
            try:
                with self.server.client(timeout=2) as c:
                    kind = c.type(fault.key).decode()
                    if kind != fault.wrong_type or not _holds(c, fault.key, kind, marker):
                        fault.moved_at = time.time()
                        fault.finish(fault.moved_at)
                        fault.detail += _outcome(fault.key, _quarantined(c, pattern, marker))
                        return
            except redis.RedisError:
                pass
            time.sleep(0.2)
        fault.finish()
        fault.detail += f" NOT MOVED within {limit:.0f}s"


def _outcome(key: str, copied: bool) -> str:
    if copied:
        return " moved aside"
    if ":work:" in key:
        # A process's work snapshot is written whole on every beat (delete, then write):
        # the beat replaces the wrong value before the key guard looks.
        return " replaced by its process's next beat (no quarantine copy)"
    return " GONE WITHOUT A QUARANTINE COPY"


def _holds(c: redis.Redis, key: str, kind: str, marker: str) -> bool:
    m = marker.encode()
    if kind == "string":
        return c.get(key) == m
    if kind == "hash":
        return c.hget(key, "soak") == m
    if kind == "list":
        return m in c.lrange(key, 0, -1)
    if kind == "set":
        return bool(c.sismember(key, m))
    if kind == "zset":
        return c.zscore(key, m) is not None
    return False


def _quarantined(c: redis.Redis, pattern: str, marker: str) -> bool:
    for key in c.scan_iter(match=pattern, count=1000):
        kind = c.type(key).decode()
        if _holds(c, key, kind, marker):
            return True
    return False
