"""Durable enqueue with real processes and real faults: a web process killed right after
its commit, Redis stopped at the commit, a relay killed between its push and its delete,
and 10,000 rows relayed by three workers at once. (SQLite and PostgreSQL:
tests/durable_support.py; real workers: tests/helpers.Worker.)

A relay that stalls (SIGSTOP) holding a pass of rows it then loses, and comes back
(SIGCONT): it pushes none of them again (docs/reliability.md, "The relay's fence").

Each test: 1,000 rows committed while nobody can relay them; a relay process reads a pass
of 500 and stops itself before its push; it loses its rows (PostgreSQL ends its session:
``idle_in_transaction_session_timeout``, or ``pg_terminate_backend``; SQLite: its turn
lapses); a real worker relays all 1,000 and runs them; the stopped relay is continued.
Every job runs exactly once. Production timings throughout (no shortened lease or turn).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from django.db import connections, transaction
from testapp import jobs as tj

from cogworker_django.durable import relay
from cogworker_django.models import OutboxEntry
from cogworker_django.store import keys

from .. import durable_support
from ..helpers import MAIN_REDIS_URL, ROOT, wait_until

pytestmark = durable_support.durable_db
db_alias = durable_support.db_alias

# A web process: enqueues durable jobs in one transaction, and is SIGKILLed at a point
# of its commit that argv names: "after-commit" (before its own relay), or "after-push"
# (its relay has pushed, not yet deleted the rows).
WEB = r"""
import os, signal, sys
import django
django.setup()
from django.db import transaction
from testapp import jobs as tj
from cogworker_django.durable import relay

alias, where, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
die = lambda *_: os.kill(os.getpid(), signal.SIGKILL)
with transaction.atomic(using=alias):
    if where == "after-commit":
        transaction.on_commit(die, using=alias)  # before the relay's (registered later)
    else:
        relay.after_push = die
    jids = tj.record.using(durable=True, using_db=alias).enqueue_many(
        [(f"web-{i}",) for i in range(count)]
    )
    print(" ".join(jids), flush=True)
print("survived", flush=True)
"""


def web(prefix, alias, where, count=3, redis_url=MAIN_REDIS_URL):
    proc = subprocess.run(
        [sys.executable, "-c", WEB, alias, where, str(count)],
        env={
            **os.environ,
            **durable_support.worker_env(),
            "DJANGO_SETTINGS_MODULE": "testproject.test_settings",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "testproject"), str(ROOT)]),
            "COGWORKER_PREFIX": prefix,
            "COGWORKER_REDIS_URL": redis_url,
            "COGWORKER_SETTINGS_JSON": "{}",
        },
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(ROOT),
    )
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert "survived" not in proc.stdout
    return proc.stdout.split()


def runs(r, prefix):
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def rows(alias):
    return OutboxEntry.objects.using(alias).count()


def start_worker(worker, **kwargs):
    env = {**durable_support.worker_env(), **kwargs.pop("env", {})}
    return worker(env=env, **kwargs)


def test_a_web_process_killed_right_after_its_commit_loses_no_job(db_alias, worker, r, prefix):
    jids = web(prefix, db_alias, "after-commit")
    assert rows(db_alias) == 3  # committed, never relayed
    assert r.llen(f"{prefix}:queue:default") == 0
    start_worker(worker)
    wait_until(lambda: len(runs(r, prefix)) == 3, 30, message="the three jobs ran")
    assert runs(r, prefix) == {f"web-{i}": 1 for i in range(3)}
    assert rows(db_alias) == 0
    assert len(jids) == 3


def test_at_the_production_timings_a_worker_relays_a_dead_web_processs_rows(
    db_alias, worker, r, prefix
):
    """The poller's interval (POLL_INTERVAL, 5 s) and every other timing at its default:
    the rows of a web process killed after its commit are pushed within a poll or two."""
    from cogworker_django.conf import DEFAULTS

    from ..helpers import FAST_SETTINGS

    production = {k: DEFAULTS[k] for k in FAST_SETTINGS if k != "RETRY_BACKOFF"}
    assert production["POLL_INTERVAL"] == 5.0
    start_worker(worker, settings=production)
    web(prefix, db_alias, "after-commit")  # (its rows left: the test above shows it)
    wait_until(lambda: len(runs(r, prefix)) == 3, 60, message="the three jobs ran")
    assert runs(r, prefix) == {f"web-{i}": 1 for i in range(3)}
    assert rows(db_alias) == 0


def test_a_relay_killed_between_its_push_and_its_delete_pushes_nothing_twice(
    db_alias, worker, r, prefix
):
    jids = web(prefix, db_alias, "after-push")
    assert rows(db_alias) == 3  # its transaction died with it
    queued = [json.loads(raw)["jid"] for raw in r.lrange(f"{prefix}:queue:default", 0, -1)]
    assert sorted(queued) == sorted(jids)  # pushed once, by the killed relay
    start_worker(worker)
    # (on SQLite after the killed relay's turn expires: relay.SQLITE_LOCK_TTL)
    wait_until(lambda: rows(db_alias) == 0, 60, message="the rows deleted by a worker")
    wait_until(lambda: len(runs(r, prefix)) == 3, 30, message="the three jobs ran")
    time.sleep(1)  # a second push would run within this
    assert runs(r, prefix) == {f"web-{i}": 1 for i in range(3)}


def test_redis_stopped_at_the_commit_every_job_runs_once_when_it_is_back(
    db_alias, worker, redis_server, configure, prefix
):
    server = redis_server()
    configure(REDIS_URL=server.url)
    start_worker(worker, redis_url=server.url)
    server.stop()
    tokens = []
    for t in range(4):  # four transactions, none raises
        with transaction.atomic(using=db_alias):
            batch = [f"outage-{t}-{i}" for i in range(5)]
            tj.record.using(durable=True, using_db=db_alias).enqueue_many([(x,) for x in batch])
            tj.record.using(durable=True, using_db=db_alias).enqueue_in(0.5, f"outage-{t}-in")
            tokens += [*batch, f"outage-{t}-in"]
    assert rows(db_alias) == len(tokens)
    server.start()
    r = server.client()
    wait_until(lambda: len(runs(r, prefix)) == len(tokens), 60, message="every job ran")
    wait_until(lambda: rows(db_alias) == 0, 10, message="the rows deleted")
    time.sleep(1)
    assert runs(r, prefix) == dict.fromkeys(tokens, 1)


def test_10000_rows_relayed_by_three_workers_at_once_are_each_pushed_once(
    db_alias, worker, configure, r, prefix
):
    # Three workers polling; none takes jobs from "bulk", so the queue shows each push.
    workers = [
        start_worker(
            worker, wait=False, args=["-q", "elsewhere"], env={"COGWORKER_LOG_LEVEL": "DEBUG"}
        )
        for _ in range(3)
    ]
    for w in workers:
        w.wait_for_log(r"cogworker \S+ started", timeout=60)
    # Committed while this process can't reach Redis (a closed port): its own relay fails
    # and the rows are the workers'.
    configure(REDIS_URL="redis://127.0.0.1:1/0")
    with transaction.atomic(using=db_alias):
        jids = tj.record.using(durable=True, using_db=db_alias, queue="bulk").enqueue_many(
            [(str(i),) for i in range(10_000)]
        )
    wait_until(lambda: rows(db_alias) == 0, 120, interval=0.5, message="every row relayed")
    listed = [json.loads(raw)["jid"] for raw in r.lrange(f"{prefix}:queue:bulk", 0, -1)]
    assert len(listed) == 10_000
    assert sorted(listed) == sorted(jids)  # each exactly once
    # The pushes each worker counted (lua/outbox_relay.lua said "pushed"): 10,000 in all.
    pushed = [
        sum(int(n) for n in re.findall(r"durable outbox: (\d+) jobs pushed", w.log()))
        for w in workers
    ]
    assert sum(pushed) == 10_000, pushed
    # Whether the work is shared depends on when each poller wakes (one may relay all
    # 10,000 before the others look); that two relays at once skip each other's rows is
    # shown deterministically by test_durable_relay.py::test_two_relays_at_once_never_take_the_same_row.


def test_a_database_lost_during_the_relay_is_said_once_and_its_rows_pushed_once_after(
    db_alias, r, prefix, caplog
):
    """PostgreSQL: the relay's connection is killed by the server between its push and
    its delete (pg_terminate_backend), then the database refuses connections (a port
    nothing listens on) for a few polls. The worker's chore says so once, without a
    backoff; when the database answers again the rows are deleted and nothing is pushed
    twice (the markers)."""
    import logging

    import pytest
    from django.db import connections

    from cogworker_django.durable import chore, relay
    from cogworker_django.store import connection

    if db_alias != "durable_pg":
        pytest.skip("a server to lose: PostgreSQL")
    with transaction.atomic(using=db_alias):
        jids = tj.record.using(durable=True, using_db=db_alias).enqueue_many([("a",), ("b",)])
        relay.after_read = lambda rows: (_ for _ in ()).throw(RuntimeError("not now"))
    relay.after_read = None
    assert rows(db_alias) == 2  # the pusher's relay was stopped: the worker's turn
    settings_dict = connections[db_alias].settings_dict
    port = settings_dict["PORT"]
    killer = connections.create_connection(db_alias)

    def lose_the_database(pushed):
        pid = connections[db_alias].connection.info.backend_pid
        with killer.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        settings_dict["PORT"] = 1  # and refuse new connections

    relay.after_push = lose_the_database
    work = chore.Chore()
    try:
        with caplog.at_level(logging.WARNING, logger="cogworker_django"):
            work.run_once(connection.get_client())
            relay.after_push = None
            work.run_once(connection.get_client())
            work.run_once(connection.get_client())
        said = [m for m in caplog.messages if f"database {db_alias!r} unavailable" in m]
        assert len(said) == 1, caplog.messages
        assert work.backoff.ready(relay.COMPONENT)
        assert sorted(j["jid"] for j in json_queue(r, prefix)) == sorted(jids)  # pushed once
    finally:
        relay.after_push = None
        settings_dict["PORT"] = port
        killer.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        work.run_once(connection.get_client())
    assert f"database {db_alias!r} recovered" in caplog.text
    assert rows(db_alias) == 0
    assert sorted(j["jid"] for j in json_queue(r, prefix)) == sorted(jids)  # not again
    assert all(0 < r.ttl(m) <= relay.MARKER_KEEP for m in r.keys(f"{prefix}:relayed:*"))


def json_queue(r, prefix):
    return [json.loads(raw) for raw in r.lrange(f"{prefix}:queue:default", 0, -1)]


# A relay that stalls (SIGSTOP) and comes back (SIGCONT).

ROWS = 1000

# The relay that stalls: one pass on the database named by argv[1], stopped (SIGSTOP, by
# itself) once it holds its rows, before it pushes them. argv[2]: PostgreSQL's
# idle_in_transaction_session_timeout for its session (ms, "0": none). It prints the rows
# it read and its backend's pid, then, once continued, what became of its pass.
RELAY = r"""
import os, signal, sys
import django
django.setup()
from django.db import connections
from cogworker_django.durable import relay
from cogworker_django.store import connection

alias, idle_timeout = sys.argv[1], int(sys.argv[2])
db = connections[alias]
backend = 0
if db.vendor == "postgresql":
    with db.cursor() as cursor:
        if idle_timeout:
            cursor.execute(f"SET idle_in_transaction_session_timeout = {idle_timeout}")
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]

def stall(rows):
    print(f"read {len(rows)} {backend}", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)

relay.after_read = stall
try:
    pushed = relay.relay_pending(connection.get_client(), alias, passes=1)
    print(f"pushed {pushed}", flush=True)
except Exception as exc:
    print(f"failed {type(exc).__name__}: {exc}", flush=True)
"""


def subprocess_env(prefix: str) -> dict[str, str]:
    return {
        **os.environ,
        **durable_support.worker_env(),
        "DJANGO_SETTINGS_MODULE": "testproject.test_settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "testproject"), str(ROOT)]),
        "COGWORKER_PREFIX": prefix,
        "COGWORKER_REDIS_URL": MAIN_REDIS_URL,
        "COGWORKER_SETTINGS_JSON": "{}",
    }


class StalledRelay:
    """The relay process above, stopped with its pass of rows in hand."""

    def __init__(self, prefix: str, alias: str, idle_timeout_ms: int = 0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RELAY, alias, str(idle_timeout_ms)],
            env=subprocess_env(prefix),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(ROOT),
        )
        line = self.proc.stdout.readline().split()  # printed just before it stops itself
        assert line[:1] == ["read"], (line, self.proc.stderr.read() if self.proc.poll() else "")
        self.read, self.backend = int(line[1]), int(line[2])
        wait_until(self.stopped, 10, message="the relay stopped")

    def stopped(self) -> bool:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"

    def resume(self) -> str:
        """SIGCONT; what it says once its pass is over."""
        self.proc.send_signal(signal.SIGCONT)
        out, self.err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, self.err[-3000:]
        return out.strip()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def stalled_relays():
    made: list[StalledRelay] = []

    def start(*args, **kwargs) -> StalledRelay:
        made.append(StalledRelay(*args, **kwargs))
        return made[-1]

    yield start
    for stalled in made:
        stalled.kill()


def backend_alive(pid: int) -> bool:
    with connections["durable_pg"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0] == 1


def write_rows(alias, configure):
    """1,000 rows committed where this process can't relay them (a closed port)."""
    configure(REDIS_URL="redis://127.0.0.1:1/0")
    with transaction.atomic(using=alias):
        tokens = [f"row-{i}" for i in range(ROWS)]
        tj.record.using(durable=True, using_db=alias).enqueue_many([(t,) for t in tokens])
    configure(REDIS_URL=MAIN_REDIS_URL)
    assert rows(alias) == ROWS
    return tokens


def relay_all_and_continue(stalled, alias, worker, r, prefix, tokens, before_continue=None):
    """A worker relays and runs every row while the relay is stopped; the relay is then
    continued (after ``before_continue``), and what it pushed, if anything, runs."""
    w = worker(env=durable_support.worker_env(), settings={"CONCURRENCY": 10})
    wait_until(lambda: rows(alias) == 0, 120, interval=0.5, message="every row relayed")
    wait_until(lambda: len(runs(r, prefix)) == ROWS, 120, interval=0.5, message="every job ran")
    if before_continue is not None:
        before_continue()
    said = stalled.resume()
    # Anything it pushed (a second push) is run by the worker: wait for the queue to empty.
    wait_until(lambda: r.llen(f"{prefix}:queue:default") == 0, 30, message="the queue drained")
    time.sleep(1.0)  # the last job fetched finishes (a job is a few ms)
    done = runs(r, prefix)
    twice = sorted(t for t, n in done.items() if n != 1)
    assert not twice, f"{len(twice)} jobs ran more than once ({said}): {twice[:5]}"
    assert done == dict.fromkeys(tokens, 1)
    assert rows(alias) == 0
    w.stop()
    return said


postgresql_only = pytest.mark.parametrize("db_alias", ["durable_pg"], indirect=True)
sqlite_only = pytest.mark.parametrize("db_alias", ["durable_sqlite"], indirect=True)


@postgresql_only
def test_postgresql_idle_in_transaction_timeout_the_relay_that_comes_back_pushes_nothing(
    db_alias, configure, worker, r, prefix, stalled_relays
):
    tokens = write_rows(db_alias, configure)
    stalled = stalled_relays(prefix, db_alias, idle_timeout_ms=1000)
    assert stalled.read == relay.BATCH
    # The server ends the stopped relay's session: its row locks are gone.
    wait_until(lambda: not backend_alive(stalled.backend), 30, message="its session ended")
    said = relay_all_and_continue(stalled, db_alias, worker, r, prefix, tokens)
    assert said.startswith("failed"), said  # its delete found its session gone


@postgresql_only
def test_postgresql_pg_terminate_backend_the_relay_that_comes_back_pushes_nothing(
    db_alias, configure, worker, r, prefix, stalled_relays
):
    tokens = write_rows(db_alias, configure)
    stalled = stalled_relays(prefix, db_alias)
    with connections[db_alias].cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [stalled.backend])
    wait_until(lambda: not backend_alive(stalled.backend), 30, message="its session ended")
    said = relay_all_and_continue(stalled, db_alias, worker, r, prefix, tokens)
    assert said.startswith("failed"), said


@pytest.fixture
def wal(db_alias):
    """The SQLite file in WAL mode (as many deployments run it): a second relay can then
    commit while the stalled one's read transaction is open. (In rollback-journal mode
    the stalled relay's read lock holds every other commit off until it ends: no second
    relay can delete the rows it holds.)"""
    if connections[db_alias].vendor != "sqlite":
        yield
        return
    with connections[db_alias].cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=WAL")
    yield
    connections[db_alias].close()
    with connections[db_alias].cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=DELETE")


@sqlite_only
def test_sqlite_the_relay_whose_turn_lapsed_pushes_nothing_when_it_comes_back(
    db_alias, configure, worker, r, prefix, stalled_relays, wal
):
    tokens = write_rows(db_alias, configure)
    stalled = stalled_relays(prefix, db_alias)
    assert stalled.read == relay.BATCH
    turn = keys.durable_relay_lock(db_alias)
    assert r.exists(turn)
    # Its turn lapses (SQLITE_LOCK_TTL, the production value): a worker takes the next.
    wait_until(lambda: not r.exists(turn), relay.SQLITE_LOCK_TTL + 10, message="turn lapsed")
    relay_all_and_continue(stalled, db_alias, worker, r, prefix, tokens)


def test_a_relay_stopped_past_its_lease_pushes_nothing_once_the_markers_are_gone(
    db_alias, configure, worker, r, prefix, stalled_relays, wal
):
    """Continued only after the markers of the rows it held have expired
    (relay.MARKER_KEEP after the other relay's commit, the production value): its pass's
    lease (relay.PASS_LEASE) has run out, and the push script refuses every row."""
    tokens = write_rows(db_alias, configure)
    stalled = stalled_relays(prefix, db_alias)
    if db_alias == "durable_pg":
        with connections[db_alias].cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [stalled.backend])
    else:
        turn = keys.durable_relay_lock(db_alias)
        wait_until(lambda: not r.exists(turn), relay.SQLITE_LOCK_TTL + 10, message="turn lapsed")

    def markers_gone():
        wait_until(
            lambda: not r.keys(f"{prefix}:relayed:*"),
            relay.MARKER_KEEP + 30,
            interval=1,
            message="the markers expired",
        )

    said = relay_all_and_continue(
        stalled, db_alias, worker, r, prefix, tokens, before_continue=markers_gone
    )
    assert "pushed 0" in said or said.startswith("failed"), said
    # Every row it held was refused by the push script, not found marked.
    assert f"{relay.BATCH} rows not pushed: this pass's lease of" in stalled.err, stalled.err
