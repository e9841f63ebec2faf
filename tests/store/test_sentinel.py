"""Sentinel: a master, a replica and three sentinels (``redis-server --sentinel``) on free
ports; a worker and a producer running; ``SENTINEL FAILOVER``: the worker follows the new
master, and every job pushed after the failover completed runs."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
import redis
from testapp import jobs as tj

from cogworker_django.store import connection, keys

from ..helpers import free_port, wait_until
from ..worker.test_faults_outage import outage_lines

MASTER_NAME = "mymaster"


class Sentinel:
    """One ``redis-server --sentinel`` with its own config file (sentinel rewrites it)."""

    def __init__(self, master_port: int) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cogworker-sentinel-"))
        self.conf = self.dir / "sentinel.conf"
        self.conf.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.dir}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
            f"sentinel failover-timeout {MASTER_NAME} 3000\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        self.proc = subprocess.Popen(
            [shutil.which("redis-server"), str(self.conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=2)

    def master_port(self) -> int | None:
        try:
            addr = self.client().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
        except redis.RedisError:
            return None
        return int(addr[1]) if addr else None

    def replica_ready(self) -> bool:
        try:
            replicas = self.client().execute_command("SENTINEL", "REPLICAS", MASTER_NAME)
        except redis.RedisError:
            return False
        for r in replicas:
            info = r if isinstance(r, dict) else dict(zip(r[::2], r[1::2], strict=True))
            if info.get("master-link-status") == "ok" and "s_down" not in info.get("flags", ""):
                return True
        return False

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def sentinels():
    started: list[Sentinel] = []

    def start(master_port: int, n: int = 3) -> list[Sentinel]:
        group = [Sentinel(master_port) for _ in range(n)]
        started.extend(group)
        return group

    yield start
    for s in started:
        s.cleanup()


class Producer(threading.Thread):
    """Pushes a record(token) job every few milliseconds, remembering when each push
    was acknowledged; push errors (during the failover) are expected and skipped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.acked: list[tuple[str, float]] = []
        self.failed = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stopping.wait(0.02):
            token = f"p{i}"
            i += 1
            try:
                tj.record.enqueue(token)
            except redis.RedisError:
                self.failed += 1
                continue
            self.acked.append((token, time.time()))


def test_worker_follows_a_sentinel_failover(redis_server, sentinels, worker, configure):
    master = redis_server()
    replica = redis_server(extra=["--replicaof", "127.0.0.1", str(master.port)])
    group = sentinels(master.port)
    wait_until(
        lambda: all(s.replica_ready() for s in group), 20, message="sentinels see the replica"
    )
    addresses = [["127.0.0.1", s.port] for s in group]
    sentinel_settings = {"SENTINELS": addresses, "SENTINEL_MASTER": MASTER_NAME}
    configure(**sentinel_settings)
    w = worker(settings=sentinel_settings)
    assert f"redis=sentinel {MASTER_NAME}@" in w.log()

    producer = Producer()
    producer.start()
    wait_until(lambda: len(producer.acked) >= 20, 10, message="producer running")
    new_master = replica.client()
    runs = f"{keys.prefix()}:test:runs"
    wait_until(lambda: new_master.hlen(runs) >= 10, 10, message="jobs replicated to the replica")
    # The jobs pushed so far, once the replica has everything the master had then: none
    # of them may be lost by the failover (what the replica had not received yet may be,
    # docs/operations.md#sentinel).
    before = [t for t, _at in list(producer.acked)]
    offset = master.client().info("replication")["master_repl_offset"]
    wait_until(
        lambda: new_master.info("replication")["slave_repl_offset"] >= offset,
        10,
        message="the replica caught up",
    )

    group[0].client().execute_command("SENTINEL", "FAILOVER", MASTER_NAME)

    def failover_completed() -> bool:
        return (
            all(s.master_port() == replica.port for s in group)
            and new_master.role()[0] == "master"
            and master.client().role()[0] == "slave"
        )

    wait_until(failover_completed, 30, message="failover completed")
    completed_at = time.time()
    wait_until(
        lambda: sum(1 for _t, at in producer.acked if at > completed_at) >= 50,
        20,
        message="50 jobs pushed after the failover",
    )
    producer.stopping.set()
    producer.join(5)
    after = [t for t, at in producer.acked if at > completed_at]

    def all_ran() -> bool:
        counts = new_master.hmget(runs, after)
        return all(c is not None for c in counts)

    wait_until(all_ran, 20, message="every job pushed after the failover ran")
    assert set(new_master.hmget(runs, after)) == {"1"}
    # Those pushed before it ran too: at least once (a run or an ack the replica never
    # got runs one again).
    wait_until(
        lambda: all(c is not None for c in new_master.hmget(runs, before)),
        20,
        message="every job pushed before the failover ran",
    )
    assert len(before) >= 20
    # the worker now beats on the new master, and is still running
    identity = wait_until(lambda: new_master.smembers(keys.processes()), 10).pop()
    assert new_master.exists(keys.process(identity))
    assert w.proc.poll() is None
    assert w.stop() == 0
    # The failover was an outage to the fetch (its connection to the old master went):
    # logged once, and its recovery once, like every other component's that saw it.
    down, up = outage_lines(w.log())
    assert "Fetch" in down, (down, w.log()[-4000:])
    assert all(n == 1 for n in down.values()) and down == up, (down, up, w.log()[-4000:])
    connection.reset()
