"""The processes a soak runs: one private ``redis-server`` and the worker processes.

Every process is started in its own session (process group), so a Ctrl-C in the
terminal reaches only the soak, which then stops them itself, and a worker started with
``--processes`` can be signalled as a whole.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "testproject" / "manage.py"
STARTED = re.compile(rb"cogworker \S+ started: identity=(\S+) pid=(\d+)")


class SoakError(RuntimeError):
    """The soak itself could not run (not a finding about the package)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # noqa: BLE001 - polled until the deadline
            pass
        time.sleep(interval)
    return False


class RedisServer:
    """``redis-server`` on a free loopback port, AOF on (a restart keeps the data)."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SoakError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = free_port()
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "logs" / "redis.log"
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, timeout: float = 5.0) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=timeout, socket_connect_timeout=2
        )

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--protected-mode",
                "yes",
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--maxmemory-policy",
                "noeviction",
                "--enable-debug-command",
                "local",
                "--logfile",
                str(self.log_path),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if not wait_until(self.answers, 30):
            raise SoakError(
                f"redis-server on port {self.port} did not come up; see {self.log_path}"
            )

    def answers(self) -> bool:
        try:
            with self.client(timeout=1) as c:
                return bool(c.ping())
        except redis.RedisError:
            return False

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM: Redis writes and syncs its AOF, then exits (nothing acknowledged is
        lost); SIGKILL only if it does not exit in ``timeout``."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


def children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return found


class Worker:
    """One ``manage.py cogworker`` process (its own process group), log in a file."""

    def __init__(self, slot: int, generation: int, args: list[str], env: dict, logdir: Path):
        self.slot = slot
        self.name = f"w{slot}.{generation}"
        self.args = args
        self.env = env
        self.log_path = logdir / f"{self.name}.log"
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.stopped = False  # SIGSTOPped now
        self.retired = False  # killed or told to stop by the soak: no longer in the fleet
        self.pids: set[int] = set()  # itself and every child seen
        self._log = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Worker:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, str(MANAGE), "cogworker", *self.args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            start_new_session=True,
        )
        self.started_at = time.time()
        self.pids.add(self.proc.pid)
        return self

    def log_bytes(self) -> bytes:
        try:
            return self.log_path.read_bytes()
        except OSError:
            return b""

    def booted_count(self) -> int:
        """How many of its processes logged their start line."""
        return len(STARTED.findall(self.log_bytes()))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def children(self) -> list[int]:
        if not self.alive():
            return []
        kids = children_of(self.pid)
        self.pids.update(kids)
        return kids

    def signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
