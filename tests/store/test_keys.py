"""Key names: all under the prefix; two prefixes on one Redis never see each other."""

import os
import subprocess
import sys

from django.test import override_settings
from testapp import jobs as tj

from cogworker_django.store import keys

from ..helpers import MAIN_REDIS_URL, ROOT


def test_every_key_is_under_the_prefix(prefix):
    built = [
        keys.queues(),
        keys.paused(keys.home_of("default")),
        keys.schedule(keys.home_of("default")),
        keys.retry(keys.home_of("default")),
        keys.dead(keys.home_of("default")),
        keys.processes(),
        keys.inprogress_ids(),
        keys.last_beat(),
        keys.live_queues(),
        keys.unsettled(keys.home_of("default")),
        keys.periodic_schedule(),
        keys.periodic_disabled(),
        keys.periodic_claimers(),
        keys.periodic_version(),
        keys.history(),
        keys.stat("processed"),
        keys.stat("failed"),
        keys.stat("failed", "2026-01-01"),
        keys.queue("q"),
        keys.process("id"),
        keys.work("id"),
        keys.inprogress("id", keys.home_of("default")),
        keys.signal("id"),
        keys.unique("d", keys.home_of("default")),
        keys.periodic_last_slot("n"),
        keys.periodic_lock("n", 1),
        keys.periodic_running("n"),
        keys.periodic_claims("id"),
        keys.result("r"),
        keys.quarantine("k", 1, "ab"),
        keys.batches(),
        *keys.batch_keys("b"),
        keys.cancels(),
        keys.outbox(),
        keys.relayed("e", keys.home_of("default")),
        keys.inprogress_homes("id"),
        keys.priority_queue("q"),
        *keys.limit_keys("l"),
    ]
    assert all(k.startswith(prefix + ":") for k in built)
    assert len(set(built)) == len(built)
    assert set(keys.fixed_types()) <= set(built)


def test_two_prefixes_never_see_each_others_keys(r, prefix):
    tj.record.enqueue("mine")
    other = prefix + "x"
    with override_settings(
        COGWORKER={"REDIS_URL": MAIN_REDIS_URL, "PREFIX": other, "TEST_PREFIX": False}
    ):
        tj.record.enqueue("theirs")
    try:
        # Named literally: keys.queue() follows the same settings as the push, so
        # checking through it would hold whatever prefix the push used.
        theirs = r.lrange(f"{other}:queue:default", 0, -1)
        mine = r.lrange(f"{prefix}:queue:default", 0, -1)
        assert len(theirs) == 1 and len(mine) == 1, (mine, theirs)
        assert '"mine"' in mine[0] and '"theirs"' in theirs[0]
        # Each push wrote the same keys, each under its own prefix (the queue and its
        # listing): none of one's writes went to the other's keys.
        mine_keys = {k[len(prefix) :] for k in r.scan_iter(match=f"{prefix}:*")}
        theirs_keys = {k[len(other) :] for k in r.scan_iter(match=f"{other}:*")}
        assert {":queue:default", ":queues"} <= mine_keys == theirs_keys, (mine_keys, theirs_keys)
        assert r.smembers(f"{prefix}:queues") == r.smembers(f"{other}:queues") == {"default"}
    finally:
        for k in r.scan_iter(match=f"{other}:*"):
            r.delete(k)


def test_the_suite_uses_the_redis_of_cogworker_redis_url(redis_server):
    """COGWORKER_REDIS_URL (the one variable the README names) moves every test's Redis:
    tests run against a private server, and their keys land there."""
    server = redis_server()
    env = {**os.environ, "COGWORKER_REDIS_URL": server.url}
    chosen = [
        "tests/store/test_keys.py::test_two_prefixes_never_see_each_others_keys",
        "tests/store/test_connection.py::test_cache_alias_uses_the_django_redis_client",
        "tests/test_checks.py::test_healthy_redis_has_no_messages",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *chosen],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout
    stats = server.client().info("commandstats")
    assert stats.get("cmdstat_lpush", {}).get("calls", 0) >= 3, stats.keys()
