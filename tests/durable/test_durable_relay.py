"""The durable relay in one process: what it pushes for each kind of job (scheduled,
unique, batch members, many at once), exactly once under a relay that fails between its
push and its delete, never the same row from two relays at once, and nothing written for
what an enqueue refuses. (Real Redis; SQLite and PostgreSQL: tests/durable_support.py.)"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import threading

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from testapp import jobs as tj

from cogworker_django import Batch, api
from cogworker_django.durable import relay
from cogworker_django.durable.entry import CLOSE
from cogworker_django.models import OutboxEntry
from cogworker_django.store import connection, keys

from .. import durable_support

pytestmark = durable_support.durable_db
db_alias = durable_support.db_alias


def rows(alias):
    return list(OutboxEntry.objects.using(alias).order_by("id"))


def queued(r, queue="default"):
    return [json.loads(raw) for raw in r.lrange(f"{keys.prefix()}:queue:{queue}", 0, -1)]


def conn():
    return connection.get_client()


def durable(fn, alias, **options):
    return fn.using(durable=True, using_db=alias, **options)


@pytest.fixture
def hooks():
    yield relay
    relay.after_push = None
    relay.after_read = None


def test_enqueue_many_of_1000_durable_jobs_is_one_insert(db_alias, r):
    with (
        CaptureQueriesContext(connections[db_alias]) as queries,
        transaction.atomic(using=db_alias),
    ):
        jids = durable(tj.record, db_alias).enqueue_many([(str(i),) for i in range(1000)])
        written = [q["sql"] for q in queries.captured_queries]
    inserts = [sql for sql in written if sql.startswith("INSERT")]
    assert len(inserts) == 1
    assert len(set(jids)) == 1000
    assert sorted(j["jid"] for j in queued(r)) == sorted(jids)
    assert rows(db_alias) == []


def test_enqueue_in_and_at_wait_in_the_schedule(db_alias, r):
    when = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    with transaction.atomic(using=db_alias):
        later = durable(tj.record, db_alias).enqueue_in(60, "in")
        at = durable(tj.record, db_alias).enqueue_at(when, "at")
        (row, _) = rows(db_alias)
        assert row.run_at is not None and row.run_at > row.created_at + 59
    scheduled = {
        json.loads(raw)["jid"]: score
        for raw, score in r.zrange(keys.schedule(keys.home_of("default")), 0, -1, withscores=True)
    }
    assert set(scheduled) == {later, at}
    assert math.isclose(scheduled[at], when.timestamp(), abs_tol=0.01)
    assert queued(r) == []


def test_a_durable_unique_job_takes_its_lock_at_relay_time(db_alias, r):
    unique = durable(tj.record, db_alias, unique="until_executed")
    with transaction.atomic(using=db_alias):
        first = unique.enqueue("same")
        second = unique.enqueue("same")  # both written: no lock until the relay
        assert len(rows(db_alias)) == 2
    assert [j["jid"] for j in queued(r)] == [first]  # the second was refused at the relay
    assert second != first
    assert rows(db_alias) == []
    (lock,) = r.keys(f"{keys.prefix()}:unique:*")
    assert r.get(lock) == first
    # A rolled-back one takes no lock: the lock is the relay's.
    r.delete(lock)
    with pytest.raises(RuntimeError), transaction.atomic(using=db_alias):
        unique.enqueue("other")
        raise RuntimeError
    assert r.keys(f"{keys.prefix()}:unique:*") == []


def test_durable_members_of_a_batch_are_counted_and_its_block_closes_after_them(db_alias, r):
    with transaction.atomic(using=db_alias):
        with Batch(on_success=tj.wf_callback.s("ok")) as batch:
            jids = [durable(tj.wf_member, db_alias).enqueue(str(i)) for i in range(3)]
        assert [row.kind for row in rows(db_alias)] == ["job", "job", "job", CLOSE]
    status = api.Batches().get(batch.bid)
    assert (status.total, status.pending, status.open_blocks) == (3, 3, 0)
    assert sorted(j["jid"] for j in queued(r)) == sorted(jids)
    assert rows(db_alias) == []


def test_a_batch_block_waits_for_durable_members_left_by_redis(db_alias, redis_server, configure):
    # (an append-only file fsynced at every write: the batch survives the SIGKILL)
    server = redis_server(extra=["--appendonly", "yes", "--appendfsync", "always"])
    configure(REDIS_URL=server.url)
    with transaction.atomic(using=db_alias):
        with Batch() as batch:  # opened (Redis up)
            server.stop()  # the members' rows and the block's close need no Redis
            jids = [durable(tj.wf_member, db_alias).enqueue(str(i)) for i in range(2)]
    assert len(rows(db_alias)) == 3  # two members and the block's close, committed
    server.start()
    client = server.client()
    assert relay.relay_pending(conn(), db_alias) == 2
    assert rows(db_alias) == []
    assert client.smembers(keys.batch_pending(batch.bid)) == set(jids)
    assert client.hget(keys.batch(batch.bid), "blocks") == "0"  # closed after them


def test_the_relay_pushes_after_the_server_forgot_its_scripts(db_alias, redis_server, configure):
    # The relay's scripts go by EVALSHA in one pipeline: refused (NOSCRIPT) after a
    # restart or SCRIPT FLUSH, they are loaded and run in their place.
    server = redis_server()
    configure(REDIS_URL=server.url)
    server.client().script_flush()
    with transaction.atomic(using=db_alias):
        jids = durable(tj.record, db_alias).enqueue_many([(str(i),) for i in range(3)])
    client = server.client()
    assert sorted(j["jid"] for j in queued(client)) == sorted(jids)
    assert rows(db_alias) == []


def test_a_batch_block_stays_open_while_a_member_row_is_left(db_alias, r):
    queue = f"{keys.prefix()}:queue:default"
    r.set(queue, "not a list")  # every push to it is refused (WRONGTYPE)
    with transaction.atomic(using=db_alias):
        with Batch() as batch:
            jid = durable(tj.wf_member, db_alias).enqueue("a")
    assert [row.kind for row in rows(db_alias)] == ["job", CLOSE]  # the push was refused
    relay.relay_pending(conn(), db_alias)
    assert [row.kind for row in rows(db_alias)] == ["job", CLOSE]  # so the block waits
    assert r.hget(keys.batch(batch.bid), "blocks") == "1"
    r.delete(queue)
    assert relay.relay_pending(conn(), db_alias) == 1
    assert rows(db_alias) == []
    assert [j["jid"] for j in queued(r)] == [jid]
    assert r.hget(keys.batch(batch.bid), "blocks") == "0"


def test_a_relay_stopped_between_its_push_and_its_delete_pushes_nothing_again(db_alias, r, hooks):
    with transaction.atomic(using=db_alias):
        jids = durable(tj.record, db_alias).enqueue_many([("a",), ("b",)])

        def fail(pushed):
            raise RuntimeError("stopped after the push")

        hooks.after_push = fail
    # The pusher's relay pushed both, then failed before its delete: rows and markers stay.
    assert sorted(j["jid"] for j in queued(r)) == sorted(jids)
    assert len(rows(db_alias)) == 2
    markers = r.keys(f"{keys.prefix()}:relayed:*")
    assert len(markers) == 2
    assert all(r.ttl(m) > relay.MARKER_KEEP for m in markers)  # a day: no commit yet
    hooks.after_push = None
    assert relay.relay_pending(conn(), db_alias) == 0  # the markers: nothing pushed again
    assert rows(db_alias) == []
    assert sorted(j["jid"] for j in queued(r)) == sorted(jids)  # each once
    # The deletes committed: the markers are kept MARKER_KEEP more (the fence).
    assert all(0 < r.ttl(m) <= relay.MARKER_KEEP for m in markers)


def test_batch_members_of_a_relay_stopped_before_its_delete_are_pushed_and_counted_once(
    db_alias, r, hooks
):
    def fail(pushed):
        raise RuntimeError("stopped after the push")

    with transaction.atomic(using=db_alias):
        with Batch() as batch:
            jids = durable(tj.wf_member, db_alias).enqueue_many([("a",), ("b",)])
        hooks.after_push = fail
    assert sorted(j["jid"] for j in queued(r)) == sorted(jids)  # pushed, rows left
    assert len(rows(db_alias)) == 3
    hooks.after_push = None
    assert relay.relay_pending(conn(), db_alias) == 0
    assert rows(db_alias) == []
    assert sorted(j["jid"] for j in queued(r)) == sorted(jids)  # each once
    assert r.lrange(keys.batch_jids(batch.bid), 0, -1) == jids  # counted once
    assert r.hget(keys.batch(batch.bid), "total") == "2"
    assert r.hget(keys.batch(batch.bid), "blocks") == "0"


def test_two_relays_at_once_never_take_the_same_row(db_alias, r, hooks):
    """On PostgreSQL a relay holding rows makes another skip them (SKIP LOCKED) and
    take the next ones, without waiting; on SQLite the other relay finds the Redis lock
    held and takes nothing."""
    pause = threading.Event()
    holding = threading.Event()
    held: list[int] = []
    OutboxEntry.objects.using(db_alias).bulk_create(
        [
            OutboxEntry(jid=f"{i:024x}", queue="default", payload=_payload(i), created_at=i)
            for i in range(relay.BATCH + 10)
        ]
    )

    def hold(read):
        if threading.current_thread().name == "first":
            held.extend(row.id for row in read)
            holding.set()
            assert pause.wait(30)

    hooks.after_read = hold

    def relay_once():
        try:
            relay.relay_pending(conn(), db_alias, passes=1)
        finally:
            connections.close_all()  # this thread's

    first = threading.Thread(target=relay_once, name="first")
    first.start()
    try:
        assert holding.wait(30)
        second = relay.relay_pending(conn(), db_alias, passes=1)
    finally:
        pause.set()
        first.join(30)
    assert len(held) == relay.BATCH
    if relay.skip_locked(db_alias):
        assert second == 10  # the ten the first relay did not hold, while it held its
    else:
        assert second == 0
        assert relay.relay_pending(conn(), db_alias) == 10  # once the first is done
    pushed = [j["jid"] for j in queued(r)]
    assert len(pushed) == len(set(pushed)) == relay.BATCH + 10
    assert rows(db_alias) == []


def _payload(i):
    return durable_support.row_payload(f"{i:024x}")


@pytest.mark.parametrize(
    "enqueue, error",
    [
        (lambda j: j.enqueue(object()), TypeError),
        (lambda j: j.enqueue(float("nan")), ValueError),
        (lambda j: j.enqueue_in(float("inf"), "a"), ValueError),
        (lambda j: j.enqueue_at(dt.datetime(2030, 1, 1), "a"), ValueError),
        (lambda j: j.enqueue("x" * (2 * 1024 * 1024)), ValueError),
        (lambda j: j.enqueue_many([(object(),)]), TypeError),
        (lambda j: j.using(durable="yes"), ValueError),
    ],
    ids=["unserialisable", "nan", "inf-delay", "naive-datetime", "too-big", "many", "option"],
)
def test_what_an_enqueue_refuses_writes_no_row(db_alias, r, enqueue, error):
    with transaction.atomic(using=db_alias):
        with pytest.raises(error):
            enqueue(durable(tj.record, db_alias))
    assert rows(db_alias) == []
    assert queued(r) == []


class StopOdd:
    """A client middleware: stops a job whose argument is odd, stamps the others."""

    def __call__(self, job, push):
        if job["args"][0] % 2:
            return None
        job["stamped"] = True
        return push(job)


def test_the_client_middleware_runs_before_the_row_is_written(db_alias, r, configure):
    configure(MIDDLEWARE={"client": ["tests.durable.test_durable_relay.StopOdd"], "server": []})
    with transaction.atomic(using=db_alias):
        kept = durable(tj.record, db_alias).enqueue(2)
        stopped = durable(tj.record, db_alias).enqueue(1)
        many = durable(tj.record, db_alias).enqueue_many([(3,), (4,)])
        assert [json.loads(row.payload)["stamped"] for row in rows(db_alias)] == [True, True]
    assert stopped is None and many[0] is None
    assert sorted(j["jid"] for j in queued(r)) == sorted([kept, many[1]])


@pytest.mark.parametrize(
    "garbage",
    [
        "not json",
        {"queue": ""},
        {"at": "soon"},
        {"at": [1]},
        {"at": math.inf},
        {"bid": ["b"]},
        {"unique": "until_executed", "unique_digest": "d", "at": {"t": 1}},
    ],
    ids=["not-json", "no-queue", "at-text", "at-list", "at-inf", "bid-list", "unique-at-object"],
)
def test_a_row_whose_payload_is_garbage_is_filed_in_dead_and_holds_up_no_other(
    db_alias, r, garbage
):
    """A row written by hand with a payload no enqueue writes: filed in dead with its
    text, its row deleted; the rows before and after it pushed in the same pass, and the
    next pass finds nothing to do (no loop on it)."""
    if isinstance(garbage, dict):
        text = json.dumps({**json.loads(_payload(1)), **garbage})
    else:
        text = garbage
    OutboxEntry.objects.using(db_alias).bulk_create(
        [
            OutboxEntry(jid=f"{0:024x}", queue="default", payload=_payload(0), created_at=0),
            OutboxEntry(jid=f"{1:024x}", queue="default", payload=text, created_at=1),
            OutboxEntry(jid=f"{2:024x}", queue="default", payload=_payload(2), created_at=2),
        ]
    )
    assert relay.relay_pending(conn(), db_alias) == 2
    assert sorted(j["jid"] for j in queued(r)) == [f"{0:024x}", f"{2:024x}"]
    assert rows(db_alias) == []
    (dead,) = [json.loads(raw) for raw in r.zrange(keys.dead(keys.root()), 0, -1)]
    assert dead["func"] == "(unparseable)"
    assert dead["error_class"] == "InvalidOutboxEntry"
    assert dead["raw_payload"] == text
    assert relay.relay_pending(conn(), db_alias) == 0
    assert r.zcard(keys.dead(keys.root())) == 1


def test_a_poll_of_an_empty_outbox_is_one_select_per_database_and_no_redis(
    db_alias, configure, caplog
):
    """The worker's chore runs at every poll of every process: on an empty outbox it
    reads each database once (its oldest row) and sends Redis nothing (its client here
    points at a closed port, so any command would fail and be logged)."""
    from cogworker_django.durable import chore

    relay.aliases()  # which databases have the table: known, as in a running worker
    configure(REDIS_URL="redis://127.0.0.1:1/0")
    work = chore.Chore()
    with (
        CaptureQueriesContext(connections[db_alias]) as queries,
        caplog.at_level(logging.DEBUG, logger="cogworker_django"),
    ):
        work.run_once(connection.get_client())
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT"]
    assert "Redis" not in caplog.text
    assert work.backoff.ready(relay.COMPONENT)


def test_a_full_pass_that_removes_no_row_is_not_repeated_within_a_poll(db_alias, r, caplog):
    """A queue key of the wrong type refuses every row (until the key guard moves it
    aside): a full batch is read, none removed; the relay waits for the next poll
    instead of reading the same rows again MAX_PASSES times."""
    OutboxEntry.objects.using(db_alias).bulk_create(
        [
            OutboxEntry(jid=f"{i:024x}", queue="default", payload=_payload(i), created_at=i)
            for i in range(relay.BATCH + 1)
        ]
    )
    r.set(f"{keys.prefix()}:queue:default", "not a list")
    with caplog.at_level(logging.ERROR, logger="cogworker_django"):
        assert relay.relay_pending(conn(), db_alias) == 0
    assert len([m for m in caplog.messages if "a row was left in the outbox" in m]) == 1
    assert len(rows(db_alias)) == relay.BATCH + 1
    r.delete(f"{keys.prefix()}:queue:default")
    assert relay.relay_pending(conn(), db_alias) == relay.BATCH + 1


def test_the_pollers_timer_never_waits_for_a_database(db_alias, r, hooks):
    """The poller calls the chore at every poll and goes on at once: the relay runs on
    the chore's own thread, so a database that hangs holds up no due job and no orphan
    recovery. Here the relay is held inside its pass until the poller's calls have
    returned (a relay run by the poller's own call would wait for that in vain)."""
    from cogworker_django.durable import chore

    from ..helpers import wait_until

    OutboxEntry.objects.using(db_alias).bulk_create(
        [OutboxEntry(jid=f"{0:024x}", queue="default", payload=_payload(0), created_at=0)]
    )
    polls_returned = threading.Event()
    held: list[bool] = []
    ran_on: list[str] = []

    def hold(read):
        ran_on.append(threading.current_thread().name)
        held.append(polls_returned.wait(30))

    hooks.after_read = hold
    work = chore.Chore()
    try:
        work(conn())
        work(conn())  # a poll while the round runs: returns too
        polls_returned.set()
        wait_until(lambda: not OutboxEntry.objects.using(db_alias).exists(), timeout=30)
    finally:
        polls_returned.set()
        work.stop()
    assert work._thread is None or not work._thread.is_alive()  # (ends with its round)
    assert held[0] is True
    assert ran_on[0] == "durable-relay"
    assert [j["jid"] for j in queued(r)] == [f"{0:024x}"]  # once


def test_a_block_that_cant_be_closed_holds_up_no_job_row(db_alias, r, caplog):
    """A close row whose batch key holds the wrong kind of value (until the key guard
    moves it aside): the close fails and its row stays, the job rows of the same pass
    are pushed and deleted (not rolled back with it)."""
    OutboxEntry.objects.using(db_alias).bulk_create(
        [
            OutboxEntry(jid=f"{0:024x}", queue="default", payload=_payload(0), created_at=0),
            OutboxEntry(kind=CLOSE, jid="token", payload="", created_at=1, bid="b" * 24),
            OutboxEntry(jid=f"{2:024x}", queue="default", payload=_payload(2), created_at=2),
        ]
    )
    r.set(keys.batch("b" * 24), "not a hash")
    with caplog.at_level(logging.ERROR, logger="cogworker_django"):
        assert relay.relay_pending(conn(), db_alias) == 2
    assert sorted(j["jid"] for j in queued(r)) == [f"{0:024x}", f"{2:024x}"]
    assert [row.kind for row in rows(db_alias)] == [CLOSE]
    assert f"the block of batch {'b' * 24} left in the outbox" in caplog.text
    # The jobs' deletes committed: their markers are kept MARKER_KEEP, no longer.
    markers = r.keys(f"{keys.prefix()}:relayed:*")
    assert len(markers) == 2 and all(0 < r.ttl(m) <= relay.MARKER_KEEP for m in markers)


def test_a_sqlite_table_dropped_since_is_found_gone_and_skipped(db_alias, caplog):
    """SQLite reports a missing table as it reports a locked database (OperationalError):
    said once, and whether the table is there is asked again, so a table dropped since
    (a migration reversed) is found gone and skipped, not queried at every poll."""
    from cogworker_django.durable import chore

    if db_alias != "durable_sqlite":
        pytest.skip("SQLite's OperationalError for a missing table")
    assert db_alias in relay.aliases()  # the table known
    with connections[db_alias].schema_editor() as editor:
        editor.delete_model(OutboxEntry)
    try:
        work = chore.Chore()
        with caplog.at_level(logging.WARNING, logger="cogworker_django"):
            work.run_once(conn())
            assert db_alias not in relay.aliases()
            work.run_once(conn())
        said = [m for m in caplog.messages if f"database {db_alias!r} unavailable" in m]
        assert len(said) == 1
        assert work.backoff.ready(relay.COMPONENT)
    finally:
        with connections[db_alias].schema_editor() as editor:
            editor.create_model(OutboxEntry)
        relay.known().tables.clear()


@pytest.mark.parametrize("unique_for", [1e300, math.inf, math.nan, -5], ids=str)
def test_a_hand_written_unique_for_out_of_range_pushes_with_its_lock(db_alias, r, unique_for):
    """A row written by hand with a unique_for no enqueue accepts (1e300 s, inf, nan, a
    negative): the job is pushed with its lock, for UNIQUE_LOCK_TTL (the default), not
    without one (Redis refused the expiry: the lock was dropped, the job pushed)."""
    job = {
        **json.loads(_payload(7)),
        "unique": "until_executed",
        "unique_digest": "d7",
        "unique_for": unique_for,
    }
    OutboxEntry.objects.using(db_alias).create(
        jid=job["jid"], queue="default", payload=json.dumps(job), created_at=0
    )
    assert relay.relay_pending(conn(), db_alias) == 1
    assert [j["jid"] for j in queued(r)] == [job["jid"]]
    (lock,) = r.keys(f"{keys.prefix()}:unique:*")
    assert r.get(lock) == job["jid"]
    assert 86000 < r.ttl(lock) <= 86400  # UNIQUE_LOCK_TTL


@pytest.fixture
def short_lease(monkeypatch):
    """A lease of half a second (the production one, relay.PASS_LEASE, is shown by
    tests/durable/test_durable_worker.py with a real stopped process)."""
    monkeypatch.setattr(relay, "PASS_LEASE", 0.5)


def test_a_pass_whose_lease_ran_out_pushes_nothing_and_leaves_its_rows(
    db_alias, r, hooks, short_lease, caplog
):
    import time

    OutboxEntry.objects.using(db_alias).bulk_create(
        [
            OutboxEntry(jid=f"{i:024x}", queue="default", payload=_payload(i), created_at=i)
            for i in range(3)
        ]
    )
    hooks.after_read = lambda held: time.sleep(1.0)  # a pass that stalled past its lease
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        assert relay.relay_pending(conn(), db_alias) == 0
    assert queued(r) == []
    assert len(rows(db_alias)) == 3  # left for the next pass
    assert r.keys(f"{keys.prefix()}:relayed:*") == []  # no marker set either
    assert "3 rows not pushed: this pass's lease of 0.5 s ran out" in caplog.text
    hooks.after_read = None
    assert relay.relay_pending(conn(), db_alias) == 3  # the next pass, in time
    assert rows(db_alias) == []


def test_batch_members_of_a_pass_whose_lease_ran_out_are_neither_pushed_nor_counted(
    db_alias, r, hooks, short_lease
):
    import time

    with transaction.atomic(using=db_alias):
        with Batch() as batch:
            durable(tj.wf_member, db_alias).enqueue_many([("a",), ("b",)])
        hooks.after_read = lambda held: time.sleep(1.0)
    assert queued(r) == []
    assert len(rows(db_alias)) == 3  # two members and the block's close
    assert r.lrange(keys.batch_jids(batch.bid), 0, -1) == []  # counted: none
    hooks.after_read = None
    assert relay.relay_pending(conn(), db_alias) == 2
    assert rows(db_alias) == []
    assert r.hget(keys.batch(batch.bid), "total") == "2"


def test_the_push_script_refuses_a_push_past_its_lease_on_redis_clock(r):
    """lua/outbox_relay.lua checks the lease against the server's own TIME: a lease
    begun PASS_LEASE + 1 s ago (Redis's clock) is refused, one begun just now is not."""
    from cogworker_django.store import outbox, scripts

    client = conn()
    now = outbox.take_lease(client, relay.PASS_LEASE).start
    target = f"{keys.prefix()}:queue:default"
    for start, answer in ((now - relay.PASS_LEASE - 1, 3), (now, 1)):
        marker = keys.relayed(f"m{answer}", keys.root())
        args = ["v", "", relay.MARKER_TTL, repr(start), relay.PASS_LEASE]
        assert scripts.run("outbox_relay", client, [marker, target], args) == answer
    assert r.lrange(target, 0, -1) == ["v"]
    assert not r.exists(keys.relayed("m3", keys.root()))  # refused: no marker either
