"""A Redis Cluster master killed mid-drain: its replica is promoted, the worker follows
the new topology by itself, and no job Redis kept is lost (docs/cluster.md#failover).

The cluster here is its own, 3 masters with a replica each (tests/cluster_support.py),
so killing a node never disturbs the session's cluster. Runs are counted on the main
Redis, not the cluster: a count kept on the killed master could go with it.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
import redis
from redis.crc import key_slot
from testapp import jobs as tj

from cogworker_django.store import connection, errors, keys

from ..cluster_support import LocalCluster
from ..helpers import MAIN_REDIS_URL, wait_until

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
