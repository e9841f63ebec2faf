"""Durable enqueue in one process: the row commits and rolls back with the caller's data,
is relayed right after the commit, and what an enqueue refuses writes no row.
(Real Redis; both databases: tests/durable_support.py.)"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connections, transaction
from testapp import jobs as tj

from cogworker_django.durable import relay
from cogworker_django.models import OutboxEntry
from cogworker_django.store import connection, keys

from .. import durable_support

pytestmark = durable_support.durable_db
db_alias = durable_support.db_alias  # the fixture: each test on SQLite and PostgreSQL


def rows(alias):
    return list(OutboxEntry.objects.using(alias).order_by("id"))


def queued(r, queue="default"):
    return [json.loads(raw) for raw in r.lrange(f"{keys.prefix()}:queue:{queue}", 0, -1)]


def test_a_durable_job_is_pushed_right_after_the_commit(db_alias, r):
    with transaction.atomic(using=db_alias):
        jid = tj.record.using(durable=True, using_db=db_alias).enqueue("a")
        assert [row.jid for row in rows(db_alias)] == [jid]  # in the transaction
        assert queued(r) == []  # nothing in Redis before the commit
    assert [j["jid"] for j in queued(r)] == [jid]
    assert rows(db_alias) == []
    # Its marker is kept only MARKER_KEEP once the delete is committed (not a day).
    (marker,) = r.keys(f"{keys.prefix()}:relayed:*")
    assert 0 < r.ttl(marker) <= relay.MARKER_KEEP
    assert r.smembers(keys.queues()) == {"default"}  # listed in the same round trip


def test_a_rolled_back_durable_job_is_never_pushed(db_alias, r):
    with pytest.raises(RuntimeError), transaction.atomic(using=db_alias):
        tj.record.using(durable=True, using_db=db_alias).enqueue("a")
        raise RuntimeError("rolled back")
    assert rows(db_alias) == []
    assert queued(r) == []
    assert relay.relay_pending(connection.get_client(), db_alias) == 0
    assert queued(r) == []


def test_a_savepoint_rolled_back_takes_its_row_and_the_commit_relays_the_rest(db_alias, r):
    """A durable job enqueued in a savepoint that rolls back (the transaction's first,
    so its commit callback goes with it) is never pushed; one enqueued after it, in the
    transaction that commits, is pushed right after the commit by the enqueuer."""
    durable = tj.record.using(durable=True, using_db=db_alias)
    with transaction.atomic(using=db_alias):
        with pytest.raises(RuntimeError), transaction.atomic(using=db_alias):
            durable.enqueue("rolled back")
            raise RuntimeError("the savepoint rolls back")
        kept = durable.enqueue("kept")
        with pytest.raises(RuntimeError), transaction.atomic(using=db_alias):
            durable.enqueue("rolled back too")
            raise RuntimeError("the savepoint rolls back")
    assert [(j["jid"], j["args"]) for j in queued(r)] == [(kept, ["kept"])]
    assert rows(db_alias) == []


def test_the_enqueuer_relays_no_row_of_another_transaction(db_alias, r):
    """A transaction that rolled back leaves its ids; on SQLite the next row written
    takes the same id. Here that row is another transaction's (written by hand, so no
    enqueuer relays it): the next commit of this connection relays its own rows only,
    and leaves that one to the workers."""
    durable = tj.record.using(durable=True, using_db=db_alias)
    with pytest.raises(RuntimeError), transaction.atomic(using=db_alias):
        durable.enqueue("rolled back")
        raise RuntimeError("rolled back")

    def other_transaction():
        try:
            OutboxEntry.objects.using(db_alias).bulk_create(
                [
                    OutboxEntry(
                        jid="f" * 24,
                        queue="default",
                        payload=durable_support.row_payload("f" * 24, "other"),
                        created_at=1,
                    )
                ]
            )
        finally:
            connections[db_alias].close()

    thread = threading.Thread(target=other_transaction)
    thread.start()
    thread.join()
    with transaction.atomic(using=db_alias):
        mine = durable.enqueue("mine")
    assert [j["jid"] for j in queued(r)] == [mine]
    assert [row.jid for row in rows(db_alias)] == ["f" * 24]  # the workers' to relay


def test_outside_a_transaction_the_row_is_written_and_relayed_at_once(db_alias, r):
    jid = tj.record.using(durable=True, using_db=db_alias).enqueue("a")
    assert [j["jid"] for j in queued(r)] == [jid]
    assert rows(db_alias) == []


def test_enqueue_durable_setting(db_alias, r, configure):
    configure(ENQUEUE_DURABLE=True)
    with transaction.atomic(using=db_alias):
        jid = tj.record.using(using_db=db_alias).enqueue("a")
        assert [row.jid for row in rows(db_alias)] == [jid]
    assert [j["jid"] for j in queued(r)] == [jid]


def test_redis_away_at_the_commit_the_block_does_not_raise_and_the_row_stays(
    db_alias, redis_server, configure
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    server.stop()
    with transaction.atomic(using=db_alias):
        jid = tj.record.using(durable=True, using_db=db_alias).enqueue("a")
    assert [row.jid for row in rows(db_alias)] == [jid]  # committed, waiting
    server.start()
    assert relay.relay_pending(connection.get_client(), db_alias) == 1
    assert rows(db_alias) == []
    listed = server.client().lrange(f"{keys.prefix()}:queue:default", 0, -1)
    assert [json.loads(raw)["jid"] for raw in listed] == [jid]


class OutboxElsewhere:
    """A database router: the outbox on ``durable_sqlite``, nothing else decided."""

    def db_for_write(self, model, **hints):
        return "durable_sqlite" if model is OutboxEntry else None

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if model_name == "outboxentry":
            return db == "durable_sqlite"
        return None


def test_a_router_that_sends_the_outbox_elsewhere_is_respected(r, settings):
    settings.DATABASE_ROUTERS = ["tests.durable.test_durable_enqueue.OutboxElsewhere"]
    with transaction.atomic(using="durable_sqlite"):
        jid = tj.record.using(durable=True).enqueue("routed")  # no using_db
        assert [row.jid for row in rows("durable_sqlite")] == [jid]
    assert [j["jid"] for j in queued(r)] == [jid]
    assert relay.aliases() == ["durable_sqlite"]  # the workers relay only there


@pytest.mark.cluster
@pytest.mark.spread
def test_every_kind_of_durable_job_on_a_cluster_too(db_alias, r, redis_mode):
    """A single Redis, a cluster with one hash tag, and a home per queue: the marker is
    in the job's queue's home (or the batch's), with what the script writes."""
    from cogworker_django import Batch

    home = keys.home_of("default")
    with transaction.atomic(using=db_alias):
        job = tj.record.using(durable=True, using_db=db_alias)
        plain = job.enqueue("plain")
        later = job.enqueue_in(600, "later")
        unique = job.using(unique="until_executed")
        first, _duplicate = unique.enqueue("u"), unique.enqueue("u")
        with Batch() as batch:
            member = tj.wf_member.using(durable=True, using_db=db_alias).enqueue("m")
    listed = {json.loads(raw)["jid"] for raw in r.lrange(keys.queue("default"), 0, -1)}
    assert listed == {plain, first, member}
    assert [json.loads(raw)["jid"] for raw in r.zrange(keys.schedule(home), 0, -1)] == [later]
    assert r.smembers(keys.batch_pending(batch.bid)) == {member}
    assert rows(db_alias) == []


def test_the_decorator_makes_every_enqueue_durable(db_alias, r):
    with transaction.atomic(using=db_alias):
        jid = tj.durable_record.using(using_db=db_alias).enqueue("a")
        assert [row.jid for row in rows(db_alias)] == [jid]
        assert queued(r) == []
        # using(durable=False) turns it off for one enqueue.
        plain = tj.durable_record.using(durable=False).enqueue("b")
        assert [j["jid"] for j in queued(r)] == [plain]
    assert {j["jid"] for j in queued(r)} == {jid, plain}


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_enqueue_durable_must_be_a_boolean(configure, value):
    from django.core.exceptions import ImproperlyConfigured

    from cogworker_django import conf

    configure(ENQUEUE_DURABLE=value)
    with pytest.raises(ImproperlyConfigured, match="ENQUEUE_DURABLE"):
        conf.get()


def test_in_a_test_mode_a_durable_job_is_recorded_at_the_commit_with_no_row(db_alias):
    from cogworker_django import Batch, testing

    with testing.fake():
        with transaction.atomic(using=db_alias):
            with Batch() as batch:
                tj.record.using(durable=True, using_db=db_alias).enqueue("in a batch")
            tj.record.using(durable=True, using_db=db_alias).enqueue("alone")
            assert tj.record.jobs == []
            assert rows(db_alias) == []
        assert [j["args"] for j in tj.record.jobs] == [["in a batch"], ["alone"]]
        assert tj.record.jobs[0]["bid"] == batch.bid
        assert testing.drain() == 2
