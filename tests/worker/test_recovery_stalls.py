"""Rule 13 under stalls: nobody is taken for dead because Redis stalled or a process was
starved of CPU for less than ORPHAN_THRESHOLD.

A checker judges another process dead only once that process has missed its beats for
a full ORPHAN_THRESHOLD during which Redis kept answering the checker (measured on
Redis's clock, from the checker's own start and from the end of the last break it saw),
and a process without a readable last-beat stamp only a full threshold after the
checker first saw it so.
"""

from __future__ import annotations

import re
import signal
import time

import redis
from testapp import jobs as tj

from cogworker_django import conf
from cogworker_django.core import payload
from cogworker_django.store import connection, keys
from cogworker_django.worker.heartbeat import Clearance, stall_gap
from cogworker_django.worker.recovery import OrphanRecovery, redis_now

from ..helpers import wait_until


def identity_of(w) -> str:
    w.wait_for_log(r"identity=\S+")
    return w.log().split("identity=")[1].split()[0]


def runs(r) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(f"{keys.prefix()}:test:runs").items()}


def judged(ident: str) -> str:
    """A checker's line on ``ident`` once it has stopped beating: missing (not yet dead),
    or, were the rule broken, its jobs recovered."""
    return rf"process {re.escape(ident)} is missing|from dead process {re.escape(ident)}"


def stop_beating(x, r, ident: str) -> None:
    """SIGSTOP X and return once no beat of its is still on its way to Redis: its
    presence TTL has run down 0.3 s since (a beat landing meanwhile would have reset it)."""
    x.signal(signal.SIGSTOP)
    ttl = r.pttl(keys.process(ident))
    wait_until(lambda: r.pttl(keys.process(ident)) < ttl - 300, 5, message="X's beats stop")


def settled(r) -> bool:
    lists = [keys.queue("default"), *r.keys(f"{keys.prefix()}:inprogress:*")]
    return all(r.llen(k) == 0 for k in lists)


def test_a_worker_starved_across_a_redis_pause_keeps_its_jobs(redis_server, configure, worker):
    """X holds three long jobs. Redis is paused (CLIENT PAUSE for longer than
    ORPHAN_THRESHOLD) and X gets no CPU when the pause ends (SIGSTOP), for less than a
    threshold after it, while the checker runs on. X's last beat is then older than the
    threshold and its presence key is gone, but Redis has answered the checker for less
    than a threshold since the pause: X is alive, and none of its jobs is recovered or
    run twice. The checker's "is missing" line shows that it judged X in that window.

    X is stopped just before the pause rather than at its end: a beat X sent during the
    pause would be run by Redis when the pause ends, stopped or not, which is not the
    case under test (a process that has not had the CPU back to beat)."""
    threshold = 8.0
    server = redis_server()
    configure(REDIS_URL=server.url)
    r = server.client()
    settings = {"ORPHAN_THRESHOLD": threshold}
    # The checker reads another queue: every job goes to X, and a wrongly recovered job
    # goes back to the queue X reads, where a second run shows.
    checker = worker(redis_url=server.url, settings={**settings, "QUEUES": ["elsewhere"]})
    checker_up = time.monotonic()
    x = worker(redis_url=server.url, settings=settings)
    x_ident = identity_of(x)
    tokens = [f"long{i}" for i in range(3)]
    tj.tracked.enqueue_many([(20, t) for t in tokens])
    wait_until(
        lambda: r.llen(keys.inprogress(x_ident, keys.home_of("default"))) == 3,
        10,
        message="X holds the 3 jobs",
    )
    # The checker has been beating for a full threshold: its start alone protects nobody.
    wait_until(lambda: time.monotonic() - checker_up >= threshold, threshold + 1)

    seen = len(re.findall(judged(x_ident), checker.log()))
    stop_beating(x, r, x_ident)
    try:
        before_pause = redis_now(r)
        pause = threshold + 1
        r.client_pause(int(pause * 1000))
        paused_at = time.monotonic()
        # Answered only once the pause is over.
        redis.Redis(port=server.port, socket_timeout=30).get("unpaused?")
        resumed_at = time.monotonic()
        assert resumed_at - paused_at >= pause - 0.5
        # A pass after the pause found X beat-less and without presence, and did not
        # take it for dead: logged once as missing (or, if the rule were broken, its
        # jobs recovered, which the checks below catch).
        checker.wait_for_log(judged(x_ident), threshold - 2, count=seen + 1)
        assert time.monotonic() - resumed_at < threshold  # X was starved for less
        assert not r.exists(keys.process(x_ident))
        assert float(r.hget(keys.last_beat(), x_ident)) <= before_pause  # X's beat is old
    finally:
        x.signal(signal.SIGCONT)
    wait_until(
        lambda: all(runs(r).get(f"{t}:end") for t in tokens), 30, message="X finished its jobs"
    )
    assert "from dead process" not in checker.log(), checker.log()[-3000:]
    wait_until(lambda: settled(r), 10, message="nothing queued or in progress")
    assert runs(r) == {**{f"{t}:start": 1 for t in tokens}, **{f"{t}:end": 1 for t in tokens}}
    assert x.stop() == 0
    assert checker.stop() == 0


def test_a_worker_without_a_stamp_is_not_recovered_before_a_full_threshold(
    redis_server, configure, worker
):
    """X is stopped and its last-beat stamp is gone (the key guard moved the hash aside,
    say); its presence key lapses: it has no stamp and no presence, yet the checker first
    saw it so less than a threshold ago. Not dead: the checker logs it as missing (which
    shows a pass judged it in that state), and X resumes, beats, and keeps its jobs."""
    threshold = 8.0
    server = redis_server()
    configure(REDIS_URL=server.url)
    r = server.client()
    settings = {"ORPHAN_THRESHOLD": threshold}
    checker = worker(redis_url=server.url, settings={**settings, "QUEUES": ["elsewhere"]})
    checker_up = time.monotonic()
    x = worker(redis_url=server.url, settings=settings)
    x_ident = identity_of(x)
    tokens = [f"long{i}" for i in range(2)]
    tj.tracked.enqueue_many([(20, t) for t in tokens])
    wait_until(
        lambda: r.llen(keys.inprogress(x_ident, keys.home_of("default"))) == 2,
        10,
        message="X holds the 2 jobs",
    )
    wait_until(lambda: time.monotonic() - checker_up >= threshold, threshold + 1)

    seen = len(re.findall(judged(x_ident), checker.log()))
    stop_beating(x, r, x_ident)
    try:
        r.hdel(keys.last_beat(), x_ident)
        hidden_at = time.monotonic()
        # The checker's passes see X without a stamp: logged as missing once it has been
        # so for four beats, recoverable only a threshold after the first such pass.
        checker.wait_for_log(judged(x_ident), threshold - 2, count=seen + 1)
        assert time.monotonic() - hidden_at < threshold
        assert not r.hexists(keys.last_beat(), x_ident)
    finally:
        x.signal(signal.SIGCONT)
    wait_until(
        lambda: all(runs(r).get(f"{t}:end") for t in tokens), 30, message="X finished its jobs"
    )
    assert "from dead process" not in checker.log(), checker.log()[-3000:]
    wait_until(lambda: settled(r), 10, message="nothing queued or in progress")
    assert runs(r) == {**{f"{t}:start": 1 for t in tokens}, **{f"{t}:end": 1 for t in tokens}}
    assert x.stop() == 0
    assert checker.stop() == 0


# In-process checks against the real Redis and its real clock: a checker is an
# OrphanRecovery with a Clearance standing for its heartbeat.


class Checker:
    def __init__(self, interval: float, since: float | None = None) -> None:
        self.clearance = Clearance(stall_gap(interval), since=since)


def ghost(r, ident: str, stamp: str | None, n: int = 2) -> None:
    """A process that left ``n`` jobs in progress and no presence key."""
    raws = [
        payload.encode(payload.build("testapp.jobs.record", [f"{ident}{i}"], jid=f"{ident}-{i}"))
        for i in range(n)
    ]
    r.rpush(keys.inprogress(ident, keys.home_of("default")), *raws)
    r.sadd(keys.inprogress_ids(), ident)
    if stamp is not None:
        r.hset(keys.last_beat(), ident, stamp)


def redis_clock() -> float:
    return redis_now(connection.get_client())


def test_an_unstamped_process_is_timed_from_when_it_was_first_seen(r, configure):
    """No stamp, or one that can't be read, and no presence: dead only a full threshold
    after this checker first saw it so (bounded by its clear stretch as always)."""
    threshold = 2.0
    configure(ORPHAN_THRESHOLD=threshold)
    conn = connection.get_client()
    ghost(r, "nostamp:1:x", None)
    ghost(r, "badstamp:1:x", "not a number")
    ghost(r, "stamped:1:x", str(int(redis_clock()) - 3600))
    recovery = OrphanRecovery("me", Checker(5.0, since=redis_clock() - 3600), "default")
    first_seen = redis_clock()
    assert recovery.run(conn) == 2  # only the old stamp counts at once
    assert r.llen(keys.inprogress("nostamp:1:x", keys.home_of("default"))) == 2
    assert r.llen(keys.inprogress("badstamp:1:x", keys.home_of("default"))) == 2
    # A later pass, still within a threshold of the first sighting: nothing.
    wait_until(lambda: redis_clock() - first_seen >= threshold / 2, threshold)
    assert recovery.run(conn) == 0
    # A fresh checker (another process) has not seen them before: nothing either.
    other = OrphanRecovery("other", Checker(5.0, since=redis_clock() - 3600), "default")
    assert other.run(conn) == 0
    wait_until(lambda: redis_clock() - first_seen >= threshold + 0.1, threshold * 2)
    assert other.run(conn) == 0
    assert recovery.run(conn) == 4
    assert r.llen(keys.queue("default")) == 6
    assert r.scard(keys.inprogress_ids()) == 0


def test_production_timings_count_from_the_checkers_clear_stretch(r, configure):
    """At the defaults (beats every 5 s, ORPHAN_THRESHOLD 300 s): a process whose last
    beat is an hour old is dead only once the checker has seen Redis answer for 300 s.
    Two beats of the checker's own (the old rule) are not enough."""
    s = configure()
    assert "ORPHAN_THRESHOLD" not in s and "HEARTBEAT_INTERVAL" not in s
    threshold, interval = conf.get().ORPHAN_THRESHOLD, conf.get().HEARTBEAT_INTERVAL
    assert (threshold, interval) == (300, 5.0)
    conn = connection.get_client()
    ghost(r, "old:1:x", str(int(redis_clock()) - 3600))
    # A checker that just started and beat: nobody is judged by time before its start.
    booted = Checker(interval)
    booted.clearance.beat(redis_clock())
    assert OrphanRecovery("booted", booted, "default").run(conn) == 0
    # One that has seen Redis answer for a second less than the threshold: not yet.
    since = redis_clock() - (threshold - 1)
    almost = OrphanRecovery("almost", Checker(interval, since=since), "default")
    assert almost.run(conn) == 0
    assert r.llen(keys.inprogress("old:1:x", keys.home_of("default"))) == 2
    # Then the threshold is reached on Redis's clock: dead.
    wait_until(lambda: redis_clock() - since >= threshold, 5)
    assert almost.run(conn) == 2
    assert r.llen(keys.queue("default")) == 2


def test_production_timings_a_starved_checker_restarts_its_clear_stretch(r, configure):
    """At the defaults: answers one beat interval apart keep the checker's clear stretch;
    a checker that made no answer for longer than ``stall_gap`` (it was starved, or Redis
    stalled) judges nobody until a beat of its own starts a new stretch, and then counts
    from there."""
    interval = conf.get().HEARTBEAT_INTERVAL
    assert interval == 5.0 and stall_gap(interval) < 2 * interval + 2
    conn = connection.get_client()
    checker = Checker(interval, since=redis_clock() - 3600)
    recovery = OrphanRecovery("me", checker, "default")
    ghost(r, "a:1:x", str(int(redis_clock()) - 3600))
    assert recovery.run(conn) == 2
    # One beat interval later (a normal gap): still clear.
    last = redis_clock()
    wait_until(lambda: redis_clock() - last >= interval, interval + 2)
    checker.clearance.beat(redis_clock())
    ghost(r, "b:1:x", str(int(redis_clock()) - 3600))
    assert recovery.run(conn) == 2
    # Now the checker makes no answer for longer than a stall gap.
    last = redis_clock()
    ghost(r, "c:1:x", str(int(redis_clock()) - 3600))
    wait_until(lambda: redis_clock() - last > stall_gap(interval), stall_gap(interval) + 3)
    assert recovery.run(conn) is None  # the break is seen: no judgement
    assert checker.clearance.since is None
    checker.clearance.beat(redis_clock())  # its next beat starts a new stretch
    assert recovery.run(conn) == 0
    assert r.llen(keys.inprogress("c:1:x", keys.home_of("default"))) == 2
