"""A relay that stalls (SIGSTOP) holding a pass of rows it then loses, and comes back
(SIGCONT): it pushes none of them again (docs/reliability.md, "The relay's fence").

Each test: 1,000 rows committed while nobody can relay them; a relay process reads a pass
of 500 and stops itself before its push; it loses its rows (PostgreSQL ends its session:
``idle_in_transaction_session_timeout``, or ``pg_terminate_backend``; SQLite: its turn
lapses); a real worker relays all 1,000 and runs them; the stopped relay is continued.
Every job runs exactly once. Production timings throughout (no shortened lease or turn).
"""

from __future__ import annotations

import os
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


def runs(r, prefix):
    return {k: int(v) for k, v in r.hgetall(f"{prefix}:test:runs").items()}


def rows(alias):
    return OutboxEntry.objects.using(alias).count()


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
