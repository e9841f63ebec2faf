"""A processor thread's own fetch (worker/dispatch.py) under real faults, with a real
worker: the fetch ran in Redis but its reply is held back on the way (a real proxy,
helpers.ReplyCutter) while the process is SIGKILLed, or while TERM arrives.

One thread, two jobs queued before the worker starts: the thread's first fetch (the
boot's) takes the first job; when that job is done the queues are not known to be
empty and no fetch is out, so the next fetch, which acks the first job and takes the
second, is the thread's own, not the feeder's. That reply is the one held back."""

from __future__ import annotations

import itertools
import re
import signal

from testapp import jobs as tj

from ..helpers import ReplyCutter, wait_until

SECOND = "own-fetch-second"


def runs(client, prefix) -> dict[str, int]:
    return {k: int(v) for k, v in client.hgetall(f"{prefix}:test:runs").items()}


def _held_at_the_second_fetch(worker, server, prefix, settings):
    client = server.client()
    tj.record.enqueue_many([("own-fetch-first",), (SECOND,)])
    proxy = ReplyCutter(server)
    proxy.hold(SECOND.encode())
    w = worker(redis_url=proxy.url, settings={"CONCURRENCY": 1, **settings})
    assert proxy.held.wait(10), "no fetch took the second job"
    (ident,) = client.smembers(f"{prefix}:processes")
    # The first job ran; the fetch that acked it and took the second ran in Redis.
    assert runs(client, prefix) == {"own-fetch-first": 1}
    listed = client.lrange(f"{prefix}:inprogress:{ident}", 0, -1)
    assert len(listed) == 1 and SECOND in listed[0]
    assert client.llen(f"{prefix}:queue:default") == 0
    # The held fetch is the thread's own: TTIN's dump of the stacks shows processor-0
    # inside its own fetch, waiting for that reply (not waiting for the feeder's).
    w.signal(signal.SIGTTIN)
    stack = wait_until(lambda: _stack_of(w.log(), "processor-0"), 10, message="the dump")
    assert "in _own_fetch" in stack, stack
    return w, proxy, ident, client


def _stack_of(log: str, thread: str) -> str | None:
    """The stack TTIN logged for ``thread`` (its lines up to the next log record)."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if re.search(rf"\bthread {re.escape(thread)} \(\d+\):$", line):
            rest = itertools.takewhile(
                lambda x: not re.match(r"\d{4}-\d\d-\d\d ", x), lines[i + 1 :]
            )
            return "\n".join(rest)
    return None


def test_a_sigkill_while_a_threads_own_fetch_is_out_loses_nothing(
    worker, redis_server, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    settings = {"ORPHAN_THRESHOLD": 3}
    w, proxy, ident, client = _held_at_the_second_fetch(worker, server, prefix, settings)
    try:
        w.kill()  # SIGKILL with the reply on its way: nothing cleaned up
    finally:
        proxy.release()
        proxy.close()
    # The job it took is on the dead process's list: another worker recovers and runs it,
    # once.
    survivor = worker(redis_url=server.url, settings=settings)
    wait_until(lambda: runs(client, prefix).get(SECOND) == 1, 30, message="recovered")
    survivor.wait_for_log(r"recovered 1 job\(s\) from dead process", timeout=10)
    assert runs(client, prefix) == {"own-fetch-first": 1, SECOND: 1}
    wait_until(lambda: not client.exists(f"{prefix}:inprogress:{ident}"), 10, message="list gone")
    assert survivor.stop() == 0
    assert runs(client, prefix) == {"own-fetch-first": 1, SECOND: 1}


def test_term_while_a_threads_own_fetch_is_out_requeues_what_it_took(
    worker, redis_server, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    w, proxy, ident, client = _held_at_the_second_fetch(worker, server, prefix, {})
    try:
        w.signal(signal.SIGTERM)
        w.wait_for_log("SIGTERM received: stopping")
        proxy.release()
        assert w.wait(20) == 0
    finally:
        proxy.close()
    # The fetch came back whole: the stop waited for it instead of closing its connection
    # under the thread (which failed it at once, or left it reading a reused descriptor
    # until its timeout while the heartbeat took the job for a lost reply).
    assert "Fetch: Redis unavailable" not in w.log(), w.log()
    # Fetched after the stop began: not run, back on its queue; the first job's ack went
    # with that fetch.
    assert "requeued 1 job(s) unfinished at shutdown" in w.log(), w.log()
    assert runs(client, prefix) == {"own-fetch-first": 1}
    queued = client.lrange(f"{prefix}:queue:default", 0, -1)
    assert len(queued) == 1 and SECOND in queued[0]
    assert not client.exists(f"{prefix}:inprogress:{ident}")


def test_a_reply_held_past_two_beats_brings_its_job_to_run_once(
    worker, redis_server, configure, prefix
):
    # The heartbeat's reconcile takes a listed job this process doesn't know for one a
    # lost reply took, after two looks; a reply only held up (a stalled proxy, a thread
    # starved of the interpreter lock) is not lost: its fetch is still out, so the job is
    # not requeued under it, and it runs once, here.
    server = redis_server()
    configure(REDIS_URL=server.url)
    w, proxy, ident, client = _held_at_the_second_fetch(
        worker, server, prefix, {"HEARTBEAT_INTERVAL": 1}
    )
    beats: set[bytes] = set()

    def three_beats() -> bool:
        beats.add(client.hget(f"{prefix}:process:{ident}", "beat") or b"")
        return len(beats - {b""}) >= 3

    try:
        wait_until(three_beats, 15, message="three beats with the reply held")
        assert "without knowing it" not in w.log(), w.log()
        proxy.release()
        wait_until(lambda: runs(client, prefix).get(SECOND) == 1, 10, message="ran")
        wait_until(
            lambda: (
                not client.llen(f"{prefix}:queue:default")
                and not client.llen(f"{prefix}:inprogress:{ident}")
            ),
            10,
            message="nothing left to run",
        )
        assert w.stop() == 0
    finally:
        proxy.close()
    assert runs(client, prefix) == {"own-fetch-first": 1, SECOND: 1}
    assert "without knowing it" not in w.log(), w.log()
    assert "Fetch: Redis unavailable" not in w.log(), w.log()
