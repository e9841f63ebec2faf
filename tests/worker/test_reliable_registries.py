"""Registry keys of the wrong type fail no beat: the presence key is the one write that
must succeed; every other write is its own best-effort step. Jobs still run."""

from __future__ import annotations

import json
import os

import pytest
from testapp import jobs as tj

from cogworker_django.conf import QueueSpec
from cogworker_django.store import keys

from ..helpers import after_boot_key_guard, wait_until

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = pytest.mark.cluster


def test_wrong_type_registries_do_not_stop_beats_or_jobs(inworker, worker_log, r, prefix):
    # The key guard would move these aside (rule 9); keep it out of the way so the
    # heartbeat itself is what is tested.
    w = inworker(settings={"KEYGUARD_INTERVAL": 3600})
    (ident,) = wait_until(lambda: r.smembers(f"{prefix}:processes"), 5, message="registered")
    after_boot_key_guard(r, prefix)
    wrong = ("processes", "queues", "last_beat", "inprogress_ids", "live_queues", "paused")
    for name in wrong:
        r.delete(f"{prefix}:{name}")
        r.set(f"{prefix}:{name}", "not the right type")
    presence = f"{prefix}:process:{ident}"
    first = float(r.hget(presence, "beat"))
    # Beats go on: the presence key keeps being rewritten (and its TTL renewed).
    wait_until(lambda: float(r.hget(presence, "beat")) > first + 1.0, 5, message="beats")
    assert r.ttl(presence) > 0
    tj.record.enqueue_many([(f"w{i}",) for i in range(20)])
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 2 + 20, 10, message="jobs still run")
    # Each refused write is logged by the beat that met it (wait for that beat).
    for what in ("process registry", "queue registry", "in-progress registry", "live queue"):
        worker_log.wait_for_log(rf"Heartbeat: {what}.*WRONGTYPE", 10)
    worker_log.wait_for_log(r"last-beat stamp failed|Heartbeat: last-beat stamp", 10)
    assert json.loads(r.hget(presence, "info"))["pid"] == os.getpid()
    for name in wrong:
        assert r.get(f"{prefix}:{name}") == "not the right type"  # untouched by the worker
        r.delete(f"{prefix}:{name}")
    w.stop()


def test_wrong_type_queue_does_not_stop_other_queues(inworker, r, prefix):
    w = inworker(queues=[QueueSpec("broken", 5), "default"], settings={"KEYGUARD_INTERVAL": 3600})
    after_boot_key_guard(r, prefix)  # the "started" line comes before it
    r.set(f"{prefix}:queue:broken", "not a list")
    tj.record.enqueue_many([(f"ok{i}",) for i in range(5)])
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 2 + 5, 10, message="default still runs")
    assert r.get(f"{prefix}:queue:broken") == "not a list"
    w.stop()
    r.delete(f"{prefix}:queue:broken")


def test_beats_after_the_server_forgot_its_scripts_stamp_through_the_script(redis_server, inworker):
    # The beat's stamp is a script in the beat's pipeline, by EVALSHA: after SCRIPT
    # FLUSH the first beat's is refused (NOSCRIPT), loaded and run in its place; no
    # later beat is refused again (each would fall back to a local stamp otherwise).
    server = redis_server()
    w = inworker(settings={"REDIS_URL": server.url}, concurrency=1)
    client = server.client()
    presence = keys.process(w.identity)
    wait_until(lambda: client.hget(presence, "beat"), 5, message="a first beat")
    client.script_flush()
    client.config_resetstat()

    def beats_after(n):
        start = float(client.hget(presence, "beat"))
        for i in range(n):
            wait_until(
                lambda s=start, i=i: float(client.hget(presence, "beat")) > s + i * 0.5,
                5,
                message=f"beat {i + 1}",
            )

    def refused():
        return client.info("commandstats").get("cmdstat_evalsha", {}).get("failed_calls", 0)

    beats_after(2)
    after_two = refused()
    assert after_two >= 1  # the stamp's EVALSHA (and the idle fetch's) met NOSCRIPT
    beats_after(4)
    assert refused() == after_two
    assert client.hget(keys.last_beat(), w.identity)
