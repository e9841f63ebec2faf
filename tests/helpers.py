"""Test support: real worker subprocesses, private redis-server processes, waiting.

Everything here talks to real processes: ``manage.py cogworker`` started with real
signals, and ``redis-server`` binaries started on free ports for fault tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
MANAGE = ROOT / "testproject" / "manage.py"
# The Redis of the suite: COGWORKER_REDIS_URL, as for everything else in this project.
MAIN_REDIS_URL = os.environ.get("COGWORKER_REDIS_URL") or "redis://127.0.0.1:6379/0"

# Timings for workers under test: fast beats and polls so tests take seconds, not minutes.
FAST_SETTINGS: dict[str, Any] = {
    "HEARTBEAT_INTERVAL": 0.5,
    "POLL_INTERVAL": 0.2,
    "ORPHAN_CHECK_INTERVAL": 0.5,
    "ORPHAN_THRESHOLD": 3,
    "KEYGUARD_INTERVAL": 1.0,
    "PERIODIC_TICK": 0.25,
    "FETCH_IDLE_MAX_INTERVAL": 0.1,
    "SHUTDOWN_TIMEOUT": 5,
    "RETRY_BACKOFF": "testapp.jobs.fast_backoff",
    "CONCURRENCY": 5,
    # The threshold's rule alone (tests of it kill workers and time their recovery); the
    # lifeline's own tests (tests/worker/test_lifeline.py) turn names on.
    "CLIENT_NAMES": False,
}


def after_boot_key_guard(r: redis.Redis, prefix: str) -> None:
    """Return once a just-started worker's key guard has made its boot pass, so a test
    can break keys that it must then leave broken. The pass runs after the poller's first
    poll: wait for two polls, each moving a due job (``record`` of "poll1", "poll2") that
    then runs. Tests counting runs count these two."""
    from cogworker_django.core import payload

    for token in ("poll1", "poll2"):
        due = payload.build("testapp.jobs.record", [token], queue="default")
        r.zadd(f"{prefix}:schedule", {payload.encode(due): time.time() - 1})
        wait_until(lambda t=token: r.hget(f"{prefix}:test:runs", t) == "1", 15, message=token)


def forked_child_gets_its_own_client() -> bool:
    """Fork; in the child, ask ``connection.get_client()`` for a client and ping it. True
    when the child's client was not the parent's object and answered; the parent's own
    client must still be the cached one afterwards (--processes forks workers: a child
    must never share its parent's sockets)."""
    from cogworker_django.store import connection

    parent = connection.get_client()
    assert parent.ping()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            child = connection.get_client()
            ok = child is not parent and child.ping()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    answered = os.read(read, 1) == b"1"
    os.close(read)
    os.close(write)
    return answered and connection.get_client() is parent


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last_exc = exc
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {message}"
        + (f" (last error: {last_exc!r})" if last_exc else "")
    )


# Ports for the servers and proxies tests start. Each pytest-xdist process takes them
# from a span of its own, below the kernel's ephemeral range (32768 up here): a port one
# test frees while its server is down (a restart test) is then never taken by another
# process's server, nor by an outgoing connection, before that test starts it again.
# Clusters take theirs from a lower block (tests/cluster_support.py), their bus ports
# (+10000) below the ephemeral range too.
PORT_SPAN = 800
SERVER_PORTS = 23000
CLUSTER_PORT_SPAN = 300
CLUSTER_PORTS = 20000


def xdist_index() -> int:
    """This test process's number (gw0 -> 0, ...); 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker[2:].isdigit() else 0


_next_port = [0]


def free_port() -> int:
    """A port nothing listens on now, from this process's span (cycling through it)."""
    first = SERVER_PORTS + (xdist_index() % 8) * PORT_SPAN
    for _ in range(PORT_SPAN):
        port = first + _next_port[0] % PORT_SPAN
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}..{first + PORT_SPAN - 1}")


class RedisServer:
    """A private ``redis-server`` on a free port that a test may stop, restart, pause."""

    def __init__(self, port: int | None = None, extra: list[str] | None = None) -> None:
        self.movable = port is None  # a free port of ours: until started, another will do
        self.port = port or free_port()
        self.extra = extra or []
        self.dir = tempfile.mkdtemp(prefix="cogworker-redis-")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        # A free port can be taken by another test process between free_port() and the
        # server's bind: that server then exits, and another port is tried (the first
        # start only: a restart keeps its port, clients know it).
        for _ in range(3):
            self._spawn()
            wait_until(self._settled, 10, message=f"redis-server on port {self.port}")
            if self.proc is not None and self.proc.poll() is None:
                self.movable = False
                return self
            if not self.movable:
                break
            self.port = free_port()
        raise RuntimeError(f"redis-server would not start on port {self.port}")

    def _spawn(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--enable-debug-command",
                "local",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _settled(self) -> bool:
        """True once this server answers (its own pid: not another test's server on the
        port), or once it has exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return True
        try:
            return int(self.client().info("server")["process_id"]) == self.proc.pid
        except redis.RedisError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis(
            port=self.port, socket_timeout=5, socket_connect_timeout=1, decode_responses=True
        )

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Worker:
    """A real ``manage.py cogworker`` subprocess with its log in a file."""

    def __init__(
        self,
        prefix: str,
        *,
        redis_url: str = MAIN_REDIS_URL,
        settings: dict | None = None,
        args: list[str] | None = None,
        periodic: dict | None = None,
        env: dict | None = None,
    ) -> None:
        self.prefix = prefix
        self.settings = {**FAST_SETTINGS, **(settings or {})}
        self.args = args or []
        self.log_path = Path(tempfile.mkstemp(prefix="cogworker-worker-", suffix=".log")[1])
        self.env = {
            **os.environ,
            "COGWORKER_PREFIX": prefix,
            "COGWORKER_REDIS_URL": redis_url,
            "COGWORKER_SETTINGS_JSON": json.dumps(self.settings),
            "COGWORKER_PERIODIC_JSON": json.dumps(periodic or {}),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True) -> Worker:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in cleanup
        self.proc = subprocess.Popen(
            [sys.executable, str(MANAGE), "cogworker", *self.args],
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            # Its own process group: the clean-up kills whatever it forked, even children
            # whose supervisor a test killed (they keep the group).
            start_new_session=True,
        )
        if wait:
            self.wait_for_log(r"cogworker \S+ started", timeout=30)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, timeout: float = 15.0, count: int = 1) -> None:
        rx = re.compile(pattern)

        def found() -> bool:
            if (
                self.proc is not None
                and self.proc.poll() is not None
                and len(rx.findall(self.log())) < count
            ):
                raise AssertionError(
                    f"worker exited ({self.proc.returncode}) before {pattern!r}:\n{self.log()[-3000:]}"
                )
            return len(rx.findall(self.log())) >= count

        try:
            wait_until(found, timeout, 0.05, message=f"log line {pattern!r}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- worker log ---\n{self.log()[-4000:]}") from None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> int:
        """TERM, then wait for the exit; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"worker did not exit within {timeout}s:\n{self.log()[-4000:]}"
            ) from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def children(self) -> list[int]:
        """The pids of the processes this one forked (``--processes``), now."""
        assert self.proc is not None
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            return []

    def kill_all(self) -> None:
        """SIGKILL this process and everything it forked (its process group): a test's
        clean-up leaves nothing running."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.kill()

    def cleanup(self) -> None:
        self.kill_all()
        try:
            self._log.close()
        except AttributeError:
            pass
        self.log_path.unlink(missing_ok=True)


def run_command(
    prefix: str,
    *args: str,
    settings: dict | None = None,
    redis_url: str = MAIN_REDIS_URL,
    timeout: float = 60,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run a manage.py command (not a long-running worker) and capture its output."""
    full_env = {
        **os.environ,
        "COGWORKER_PREFIX": prefix,
        "COGWORKER_REDIS_URL": redis_url,
        "COGWORKER_SETTINGS_JSON": json.dumps(settings or {}),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, str(MANAGE), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
    )


class ReplyCutter:
    """A TCP proxy in front of a redis-server that can lose one reply for real: once
    armed with a byte pattern, the first reply from the server containing it is thrown
    away and that connection closed both ways, so the command ran in Redis and its
    client only sees a dropped connection (a lost reply). Or it can hold one back
    (:meth:`hold`): the command ran in Redis, and its client reads the reply only once
    the test calls :meth:`release` (a slow network, a stalled client)."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._pattern: bytes | None = None
        self._lock = threading.Lock()
        self.cut = threading.Event()
        self._hold_pattern: bytes | None = None
        self.held = threading.Event()  # a reply is being held back
        self._released = threading.Event()
        self._closing = False
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, pattern: bytes) -> None:
        with self._lock:
            self.cut.clear()
            self._pattern = pattern

    def hold(self, pattern: bytes) -> None:
        """Hold back the first reply containing ``pattern`` until :meth:`release`."""
        with self._lock:
            self.held.clear()
            self._released.clear()
            self._hold_pattern = pattern

    def release(self) -> None:
        self._released.set()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.server.port))
            except OSError:
                client.close()
                continue
            self._socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if replies:
                    with self._lock:
                        hit = self._pattern is not None and self._pattern in data
                        if hit:
                            self._pattern = None
                    if hit:
                        self.cut.set()
                        break  # the reply is dropped with the connection
                    with self._lock:
                        wait = self._hold_pattern is not None and self._hold_pattern in data
                        if wait:
                            self._hold_pattern = None
                    if wait:
                        self.held.set()
                        self._released.wait(30)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._closing = True
        self._released.set()
        self._listener.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass
