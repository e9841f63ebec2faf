"""api.ProcessSet and api.Workers with a real worker subprocess: listing, busy work,
quiet and stop through pub/sub, and stale registry members."""

import json
import time

from testapp import jobs as tj

from cogworker_django import keys
from cogworker_django.api import ProcessSet, Workers

from .helpers import wait_until


def test_stale_members_are_skipped_and_pruned(r):
    r.sadd(keys.processes(), "gone-process")
    r.sadd(keys.processes(), "garbled")
    r.hset(keys.process("garbled"), mapping={"info": "{not json", "busy": "x", "beat": "?"})
    procs = ProcessSet().list()
    assert [p.identity for p in procs] == ["garbled"]
    assert procs[0].hostname == "" and procs[0].busy == 0 and procs[0].beat is None
    assert not r.sismember(keys.processes(), "gone-process")


def test_busy_entries_that_do_not_decode_still_show(r):
    ident = "p1"
    r.sadd(keys.processes(), ident)
    r.hset(
        keys.process(ident), mapping={"info": json.dumps({"hostname": "h"}), "beat": time.time()}
    )
    r.hset(keys.work(ident), mapping={"t1": "not json", "t2": json.dumps({"payload": "{}"})})
    busy = Workers().list()
    assert len(busy) == 2 and all(b.record.unparseable for b in busy)


def test_live_worker_busy_quiet_and_stop(worker, r):
    tj.slow.enqueue(30, "long")
    w = worker(settings={"SHUTDOWN_TIMEOUT": 1})  # the stop below needn't wait out the job
    ps = ProcessSet()
    proc = wait_until(lambda: ps.list() and ps.list()[0], 15, message="process listed")
    assert proc.pid == w.pid and proc.concurrency == 5 and proc.queues == ["default:1"]
    assert proc.started_at is not None and proc.rss_kb
    busy = wait_until(lambda: Workers().list(), 15, message="busy job listed")
    assert busy[0].record.func == "testapp.jobs.slow" and busy[0].record.args == [30, "long"]
    assert busy[0].identity == proc.identity and busy[0].started_at is not None

    assert ps.quiet(proc.identity) == 1
    wait_until(lambda: ps.get(proc.identity).quiet, 10, message="quiet shown")
    w.wait_for_log("quiet requested from the admin")

    assert ps.stop(proc.identity) == 1
    w.wait_for_log("stop requested from the admin")
    assert w.wait(30) == 0
    assert ps.list() == []
    # The unfinished job went back to its queue (graceful stop loses nothing).
    assert r.llen(keys.queue("default")) == 1
    assert ps.quiet(proc.identity) == 0  # nobody listens any more
