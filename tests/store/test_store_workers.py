"""Worker processes on Redis Cluster and through failovers: what needs the process (its
boot line and exit code, a SIGKILL, a worker riding out a master that fails over).

- A cluster: a plain Redis named as a cluster is refused by the command; the worker's
  boot line says how many masters answer; the script calls per job over weighted queues
  (one tag, a home per queue); a worker SIGKILLed with jobs in the homes of two masters,
  recovered by the next. On the session's local cluster (tests/cluster_support.py).
- A Redis Cluster master killed mid-drain: its replica is promoted, the worker follows
  the new topology by itself, and no job Redis kept is lost (docs/cluster.md#failover).
  That cluster is its own, 3 masters with a replica each, so killing a node never
  disturbs the session's cluster. Runs are counted on the main Redis, not the cluster: a
  count kept on the killed master could go with it.
- Sentinel: a master, a replica and three sentinels (``redis-server --sentinel``) on free
  ports; a worker and a producer running; ``SENTINEL FAILOVER``: the worker follows the
  new master, and every job pushed after the failover completed runs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot
from testapp import jobs as tj

from cogworker_django import checks
from cogworker_django.store import cluster, connection, errors, keys

from ..cluster_support import LocalCluster
from ..helpers import MAIN_REDIS_URL, free_port, run_command, wait_until
from ..worker.test_faults_outage import outage_lines
from .test_cluster_spread import counts, three_masters

JOBS_BEFORE, JOBS_AFTER = 300, 50


@pytest.fixture(scope="module")
def ha_cluster():
    cluster = LocalCluster.start(masters=3, replicas=1)
    yield cluster
    cluster.stop()


def slot_owner(cluster: LocalCluster, slot: int, skip: int | None = None) -> int:
    """The port of the master serving ``slot``, as any live node other than ``skip``
    sees it (redis-py parses CLUSTER NODES into address -> flags, slots, ...)."""
    for port in cluster.nodes:
        if port == skip:
            continue
        try:
            nodes = cluster.node(port).execute_command("CLUSTER NODES")
        except redis.RedisError:
            continue
        for address, node in nodes.items():
            if "master" not in node["flags"] or "fail" in node["flags"]:
                continue
            for span in node["slots"]:
                if int(span[0]) <= slot <= int(span[-1]):
                    return int(address.rsplit(":", 1)[1].split("@")[0])
    raise AssertionError(f"no live master serves slot {slot}")


def node_pid(cluster: LocalCluster, port: int) -> int:
    return int((cluster.dir / str(port) / "redis.pid").read_text().strip())


def tallies(key: str) -> dict[str, int]:
    client = redis.Redis.from_url(MAIN_REDIS_URL, decode_responses=True)
    try:
        return {k: int(v) for k, v in client.hgetall(key).items()}
    finally:
        client.close()


def enqueue_through_outage(tally: str, token: str, deadline: float) -> None:
    """Push once the client has found the new master: a push that raised an outage
    error did not go in (rule 1), so it is pushed again; the client reloads the slot map
    after that error by itself."""
    while True:
        try:
            tj.tally_elsewhere.enqueue(MAIN_REDIS_URL, tally, token)
            return
        except redis.RedisError as exc:
            assert errors.is_unavailable(exc), exc
            assert time.monotonic() < deadline, f"no push went through: {exc}"
            time.sleep(0.2)


def test_a_master_killed_mid_drain_fails_over_and_the_worker_carries_on(
    ha_cluster, configure, worker, prefix
):
    configure(REDIS_URL=ha_cluster.url, CLUSTER=True)  # (a cluster's key names)
    slot = key_slot(keys.queue("default").encode())  # the master holding the jobs
    old = slot_owner(ha_cluster, slot)
    # REDIS_URL names the master about to be killed (it names one node, and any node may
    # fail): what a process builds after the failover, as the worker's signal subscriber
    # builds a client at each reconnect, must find the cluster without it.
    url = f"redis://127.0.0.1:{old}/0"
    configure(REDIS_URL=url, CLUSTER=True)
    tally = f"{prefix}:test:failover"
    tokens = [f"before-{i}" for i in range(JOBS_BEFORE)]
    for token in tokens:
        tj.tally_elsewhere.enqueue(MAIN_REDIS_URL, tally, token, 0.03)
    # Asynchronous replication: make sure the replica has the pushes before the kill
    # (what it may still lose is said in docs/cluster.md#failover).
    assert ha_cluster.node(old).execute_command("WAIT", 1, 5000) >= 1

    w = worker(redis_url=url, env={"COGWORKER_CLUSTER": "1"})
    concurrency = w.settings["CONCURRENCY"]
    wait_until(lambda: len(tallies(tally)) >= 30, 30, message="the drain to start")
    queued_then = ha_cluster.node(old).llen(keys.queue("default"))
    os.kill(node_pid(ha_cluster, old), signal.SIGKILL)
    killed_at = time.monotonic()
    # Jobs were still queued on the master killed: the worker holds at most one job per
    # thread beyond those that had run (its feeder fetches only for free threads), and
    # the rest were on the dead master's list.
    ran_then = len(tallies(tally))
    assert queued_then > 0 and ran_then + concurrency < JOBS_BEFORE, (queued_then, ran_then)

    new = None

    def promoted() -> bool:
        nonlocal new
        try:
            new = slot_owner(ha_cluster, slot, skip=old)
        except AssertionError:
            return False
        info = ha_cluster.node(new).execute_command("CLUSTER INFO")
        return new != old and info.get("cluster_state") == "ok"

    wait_until(promoted, 30, 0.2, message="a replica promoted")
    print(f"\nfailover: master {old} killed, {new} serves slot {slot} after "
          f"{time.monotonic() - killed_at:.1f}s")  # fmt: skip

    # This process's client follows the new topology too: pushes go through.
    after = [f"after-{i}" for i in range(JOBS_AFTER)]
    deadline = time.monotonic() + 30
    for token in after:
        enqueue_through_outage(tally, token, deadline)

    # A client built now starts from the nodes this process's client has learned; seeded
    # with REDIS_URL's node alone it could never reach the cluster again (the subscriber
    # of a worker whose channel's slot was on the dead master never reconnected).
    fresh = connection.new_client()
    pubsub = fresh.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.signal("anyone"))
    assert fresh.ping()
    pubsub.close()
    fresh.close()

    wanted = set(tokens) | set(after)
    wait_until(lambda: wanted <= set(tallies(tally)), 90, 0.2, message="every job run")
    assert w.proc is not None and w.proc.poll() is None, w.log()[-3000:]
    # At least once: a fetch or an ack the replica never received runs a job again.
    counts = tallies(tally)
    repeated = {t: n for t, n in counts.items() if n > 1}
    print(f"failover: {len(counts)} jobs ran, {len(repeated)} of them twice or more")
    wait_until(lambda: connection.get_client().llen(keys.queue("default")) == 0, 30)
    assert w.stop() == 0, w.log()[-3000:]
    # The fetch met the outage and said so, and every part that reported one said it
    # had recovered afterwards (errors.report / errors.recovered).
    log = w.log()
    down = [(m.start(), m.group(1)) for m in re.finditer(r"(\S+): Redis unavailable", log)]
    up = [(m.start(), m.group(1)) for m in re.finditer(r"(\S+): Redis recovered", log)]
    assert "Fetch" in {part for _, part in down}, log[-3000:]
    for at, part in down:
        assert any(later > at and p == part for later, p in up), (part, log[-3000:])


@pytest.fixture(scope="module")
def bare_cluster():
    cluster = LocalCluster.start(masters=3, replicas=0)
    yield cluster
    cluster.stop()


def test_a_master_down_without_a_replica_is_an_outage_the_worker_rides_out(
    bare_cluster, configure, worker, prefix
):
    """No replica to promote: every command fails (CLUSTERDOWN, refused connections,
    the slot map reloaded without that master's slots) until the master is back. The
    worker logs the outage once per component, never fails a job for it, and carries on
    when the master returns (empty: nothing was kept on disk)."""
    configure(REDIS_URL=bare_cluster.url, CLUSTER=True)
    tally = f"{prefix}:test:outage"
    w = worker(redis_url=bare_cluster.url, env={"COGWORKER_CLUSTER": "1"})
    for i in range(20):
        tj.tally_elsewhere.enqueue(MAIN_REDIS_URL, tally, f"before-{i}")
    wait_until(lambda: len(tallies(tally)) == 20, 30, message="the first jobs run")
    slot = key_slot(keys.queue("default").encode())  # the master holding the jobs
    port = slot_owner(bare_cluster, slot)
    os.kill(node_pid(bare_cluster, port), signal.SIGKILL)
    w.wait_for_log(r"Redis unavailable", timeout=30)
    time.sleep(3)  # several heartbeats, polls and fetches against a cluster that is down
    assert w.proc is not None and w.proc.poll() is None, w.log()[-3000:]
    bare_cluster.restart(port)
    deadline = time.monotonic() + 30
    for i in range(20):
        enqueue_through_outage(tally, f"after-{i}", deadline)
    wait_until(lambda: len(tallies(tally)) == 40, 60, 0.2, message="the later jobs run")
    w.wait_for_log(r"Redis recovered", timeout=30)
    log = w.log()
    # Rule 5: once per component while it lasts, never a line per retry, and nothing
    # read as a deterministic error ("failed:") or a crashed thread.
    outage = [line for line in log.splitlines() if "Redis unavailable" in line]
    components = {line.split("cogworker_django: ", 1)[-1].split(":")[0] for line in outage}
    print("\noutage lines:\n" + "\n".join(outage))
    assert len(outage) <= 2 * len(components), "\n".join(outage)
    assert " failed: " not in log and "Traceback" not in log, log[-4000:]
    assert w.stop() == 0, w.log()[-3000:]


# A cluster: the session's local cluster.


@pytest.fixture
def cluster_url(local_cluster):
    return local_cluster.url


def test_a_plain_redis_is_a_clear_error_on_first_use_and_in_check(configure, prefix):
    configure(REDIS_URL=MAIN_REDIS_URL, CLUSTER=True)
    client = connection.get_client()  # built lazily: nothing contacted yet
    with pytest.raises(cluster.NotACluster, match="not a cluster node"):
        client.ping()
    assert not errors.is_unavailable(cluster.NotACluster("x"))
    found = checks.redis_messages()
    assert [m.id for m in found] == ["cogworker.E005"]
    assert "Set CLUSTER to False" in found[0].msg
    done = run_command(prefix, "cogworker", env={"COGWORKER_CLUSTER": "1"}, timeout=60)
    assert done.returncode != 0 and "not a cluster node" in done.stderr


def test_the_worker_says_at_boot_how_many_masters_answer(worker, cluster_url):
    w = worker(redis_url=cluster_url, env={"COGWORKER_CLUSTER": "1"})
    w.wait_for_log(r"INFO .*Redis Cluster at cluster redis://\S+ answers: 3 masters.*I001")
    assert "WARNING" not in w.log().split("I001")[0].splitlines()[-1]


@pytest.mark.parametrize("tagged", [True, False], ids=["one-tag", "home-per-queue"])
def test_script_calls_per_job_over_weighted_queues(
    configure, worker, local_cluster, prefix, tagged
):
    """One tag: every queue of a prefix is in one slot, so one fetch script reads them
    all in weighted order and carries the acks: at most one EVALSHA per job. A home per
    queue: a fetch asks the homes in weighted order, the next only for what the first
    could not give, and acks for other homes ride a pipeline: counted over every master
    (docs/performance.md#redis-cluster has the numbers)."""
    configure(
        REDIS_URL=local_cluster.url, CLUSTER=True, PREFIX="{" + prefix + "}" if tagged else prefix
    )
    assert keys.spread() is not tagged
    for q in ("a", "b", "c"):
        tj.record.using(queue=q).enqueue_many([(f"{q}-{i}",) for i in range(200)])
    client = connection.get_client()
    masters = {cluster.data_node(client, keys.queue(q)) for q in ("a", "b", "c")}
    masters.add(cluster.data_node(client, keys.root()))
    for node in masters:
        node.config_resetstat()
    worker(
        prefix_=keys.prefix(),
        redis_url=local_cluster.url,
        env={"COGWORKER_CLUSTER": "1"},
        settings={"QUEUES": ["a:3", "b:2", "c"], "CONCURRENCY": 5},
    )
    wait_until(lambda: client.hlen(tj.runs_key()) == 600, 60, 0.1, message="600 jobs run")
    calls = sum(
        node.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)
        for node in masters
        for command in ("evalsha", "eval")  # every script call, whichever way it is sent
    )
    print(f"\ncluster ({'one tag' if tagged else 'home per queue'}): {calls / 600:.2f} "
          "script calls per job over 3 weighted queues")  # fmt: skip
    assert calls / 600 <= (1.1 if tagged else 2.0), calls


@pytest.mark.spread
def test_sigkill_recovery_finds_the_lists_of_every_home(worker, r):
    qs = three_masters()[:2]
    settings = {"ORPHAN_THRESHOLD": 2, "CONCURRENCY": 4, "QUEUES": qs}
    for q in qs:
        for i in range(2):
            tj.tracked.using(queue=q).enqueue(4, f"{q}-{i}")
    a = worker(settings=settings)
    wait_until(lambda: sum(1 for k in counts(r) if k.endswith(":start")) == 4, 15)
    (ident,) = r.smembers(keys.processes())
    assert set(r.smembers(keys.inprogress_homes(ident))) == {keys.home_of(q) for q in qs}
    for q in qs:
        assert r.llen(keys.inprogress(ident, keys.home_of(q))) == 2
    a.kill()
    b = worker(settings=settings)
    b.wait_for_log(r"recovered \d job\(s\) from dead process", timeout=15)
    wait_until(lambda: sum(1 for k in counts(r) if k.endswith(":end")) == 4, 20)
    c = counts(r)
    assert all(c[f"{q}-{i}:end"] == 1 for q in qs for i in range(2)), c
    for q in qs:
        assert not r.exists(keys.inprogress(ident, keys.home_of(q)))
    assert b.stop() == 0


# Sentinel.

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
