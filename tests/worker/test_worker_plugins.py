"""Worker plugins (worker/plugins.py) and the in-process worker (worker/inprocess.py):
every part a plugin gives reaches a real worker, in the list's order; a plugin whose
parts raise stops nothing else; the in-process worker runs jobs against the real Redis
and stops as on TERM."""

from __future__ import annotations

import threading
import time

import pytest
from testapp import jobs as tj

from cogworker_django.controls.limits import LimitsMiddleware
from cogworker_django.core.unique import UniqueMiddleware
from cogworker_django.djtasks.middleware import TaskResultMiddleware
from cogworker_django.history import HistoryMiddleware
from cogworker_django.observe.runlog import RunLogMiddleware
from cogworker_django.observe.telemetry import TelemetryMiddleware
from cogworker_django.periodic.running_lock import RunningLockMiddleware
from cogworker_django.store import keys
from cogworker_django.worker import plugins
from cogworker_django.worker.heartbeat import Beat
from cogworker_django.worker.inprocess import InProcessWorker
from cogworker_django.workflows.middleware import BatchMiddleware


@pytest.fixture(autouse=True)
def project_limits(configure):
    """The test project's limiters: a worker validates every registered job's at boot."""
    configure(LIMITS={"test-pair": {"concurrency": 2}, "test-rate": {"rate": 3, "per": 2}})


class Recorder(plugins.Plugin):
    """Writes down every call the worker makes to it (from any of its threads)."""

    name = "Recorder"

    def __init__(self, calls: list[str] | None = None, tag: str = "") -> None:
        self.calls = [] if calls is None else calls
        self.tag = tag
        self.ctx: plugins.RunContext | None = None
        self.beats: list[Beat] = []
        self.ran: list[str] = []
        self.lock = threading.Lock()

    def _note(self, what: str) -> None:
        with self.lock:
            self.calls.append(self.tag + what)

    def validate(self) -> None:
        self._note("validate")

    def middleware(self) -> tuple:
        def wrap(job, queue, run):
            with self.lock:
                self.ran.append(job["func"])
            self._note("run")
            return run()

        return (wrap,)

    def start(self, ctx):
        self.ctx = ctx
        self._note("start")
        owner = self

        class Component:
            def start(self):
                owner._note("component start")

            def stop(self):
                owner._note("component stop")

        return (Component(),)

    def timers(self, ctx):
        return (("Recorder timer", 0.0, lambda conn: self._note("timer")),)

    def beat(self, ctx, beat):
        with self.lock:
            self.beats.append(beat)
        self._note("beat")

    def renamed(self, ctx):
        self._note(f"renamed {ctx.identity}")

    def exit(self, ctx):
        self._note("exit")


class Hostile(plugins.Plugin):
    """Every part it gives raises."""

    name = "Hostile"

    def timers(self, ctx):
        def boom(conn):
            raise RuntimeError("timer boom")

        return (("Hostile timer", 0.0, boom),)

    def beat(self, ctx, beat):
        raise RuntimeError("beat boom")

    def renamed(self, ctx):
        raise RuntimeError("renamed boom")

    def exit(self, ctx):
        raise RuntimeError("exit boom")


def test_the_builtin_plugins_give_the_chain_in_its_order():
    chain = plugins.middleware_of(plugins.builtin())()
    assert [type(m) for m in chain] == [
        HistoryMiddleware,
        RunLogMiddleware,
        TelemetryMiddleware,
        UniqueMiddleware,
        RunningLockMiddleware,
        LimitsMiddleware,
        TaskResultMiddleware,
        BatchMiddleware,
    ]
    again = plugins.middleware_of(plugins.builtin())()
    assert not set(map(id, chain)) & set(map(id, again))  # a new set per chain


def test_only_plugins_that_beat_are_called_on_each_beat():
    ctx = object()
    hooks = plugins.beat_hooks(plugins.builtin(), ctx)  # type: ignore[arg-type]
    owners = [(name, type(h.func.__self__).__name__) for name, h in hooks]
    assert owners == [
        ("Periodic", "Periodic"),
        ("Controls", "Controls"),
        ("django.tasks", "DjangoTasks"),
    ]


def test_a_worker_calls_every_part_of_its_plugins(cogworker_worker, r):
    rec = Recorder()
    w = cogworker_worker(queues=["default"], concurrency=2, plugins=(*plugins.builtin(), rec))
    assert rec.calls[:2] == ["validate", "start"]
    assert rec.ctx is not None and rec.ctx.identity == w.identity
    assert rec.ctx.ledger is w.manager.ledger and rec.ctx.watchdog is w.manager.watchdog
    # The first beat is written at boot, before the components start.
    assert "beat" in rec.calls and rec.calls.index("beat") < rec.calls.index("component start")
    assert rec.beats[0].recovering is False and rec.beats[0].conn is not None
    for i in range(3):
        tj.record.enqueue(f"t{i}")
    w.run_until(lambda: len(r.hgetall(tj.runs_key())) == 3)
    w.run_until(lambda: rec.calls.count("timer") >= 2)
    # (The project's settings have periodic demo entries: the builtin plugins fire them.)
    assert [j for j in rec.ran if not j.startswith("demo.")] == ["testapp.jobs.record"] * 3
    w.stop()
    # The poller's timers go on through the drain, after the components stop (the chores
    # thread stops at the hand-over: rule 16), never after the exit.
    assert [c for c in rec.calls if c != "timer"][-2:] == ["component stop", "exit"]
    assert rec.calls[-1] == "exit"
    assert not r.exists(keys.process(w.identity))
    assert not r.sismember(keys.processes(), w.identity)
    # Its threads are gone with it (the test process goes on).
    left = [
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("processor-", "durable-relay", "poller", "heartbeat", "history"))
    ]
    assert left == []


def test_plugins_are_called_in_the_list_order(cogworker_worker, r):
    """A real worker, started and stopped: every hook of two plugins is called first
    for the first of the list, then for the second (the middleware: the first outermost)."""
    calls: list[str] = []
    first, second = Recorder(calls, "1:"), Recorder(calls, "2:")
    w = cogworker_worker(queues=["default"], concurrency=1, plugins=(first, second))
    tj.record.enqueue("ordered")
    w.run_until(lambda: r.hget(tj.runs_key(), "ordered") == "1")
    w.run_until(lambda: calls.count("2:timer") >= 1 and calls.count("2:beat") >= 1)
    w.stop()
    for hook in ("validate", "start", "component start", "timer", "beat", "run", "exit"):
        seen = [c for c in calls if c.split(":", 1)[1] == hook]
        assert seen[:2] == [f"1:{hook}", f"2:{hook}"], (hook, calls)


@pytest.mark.cogworker_redis
def test_a_plugin_whose_every_part_raises_stops_nothing_else(r, caplog):
    rec = Recorder()
    with InProcessWorker(queues=["default"], concurrency=1, plugins=(Hostile(), rec)) as w:
        tj.record.enqueue("after-hostile")
        w.run_until(lambda: r.hget(tj.runs_key(), "after-hostile") == "1")
        # The hostile timer failed and the next one still ran, poll after poll.
        w.run_until(lambda: rec.calls.count("timer") >= 2)
        w.manager  # noqa: B018 - still there
        w.launcher.heartbeat.beat()  # a beat after the hostile one's failure still calls it
        assert rec.calls.count("beat") >= 2
        new = w.launcher._reidentify()  # fenced: the next plugin still follows the rename
        assert f"renamed {new}" in rec.calls
        tj.record.enqueue("after-rename")
        w.run_until(lambda: r.hget(tj.runs_key(), "after-rename") == "1")
    assert rec.calls[-1] == "exit"  # after the hostile exit raised
    assert not r.exists(keys.process(w.identity))
    assert "Hostile failed: RuntimeError: beat boom" in caplog.text
    assert "Hostile failed: RuntimeError: exit boom" in caplog.text
    assert "Hostile failed: RuntimeError: renamed boom" in caplog.text


@pytest.mark.cogworker_redis
def test_the_in_process_worker_files_a_failure_as_a_real_one(r):
    with InProcessWorker(queues=["default"], concurrency=1) as w:
        jid = tj.always_fails.enqueue("in process")
        w.run_until(lambda: r.zcard(keys.retry(keys.home_of("default"))) == 1)
    (entry,) = r.zrange(keys.retry(keys.home_of("default")), 0, -1)
    assert jid in entry and "in process" in entry


@pytest.mark.cogworker_redis
def test_stop_hands_back_a_job_still_running():
    token = "inprocess-handback"
    gate = tj.gate(token)
    try:
        w = InProcessWorker(queues=["default"], concurrency=1, shutdown_timeout=0.2).start()
        jid = tj.wait_at_gate.enqueue(token)
        w.run_until(lambda: tj.entered[token].is_set())
        w.stop()
        from cogworker_django.store import connection

        queued = connection.get_client().lrange(keys.queue("default"), 0, -1)
        assert len(queued) == 1 and jid in str(queued[0])  # back on its queue, not lost
    finally:
        gate.set()


@pytest.mark.cogworker_redis
def test_the_in_process_worker_fires_periodic_entries_only_when_asked(r, settings):
    settings.COGWORKER_PERIODIC = {
        "every-second": {"cron": "* * * * * *", "job": "testapp.jobs.record", "args": ["tick"]}
    }
    with InProcessWorker(queues=["default"], concurrency=1):
        time.sleep(2.5)  # two slots and more, and the one at start (PERIODIC_GRACE)
    assert r.hget(tj.runs_key(), "tick") is None
    with InProcessWorker(queues=["default"], concurrency=1, periodic=True) as w:
        w.run_until(lambda: r.hget(tj.runs_key(), "tick"), timeout=10)


def test_bad_arguments_and_misuse_are_refused():
    with pytest.raises(ValueError, match="at least one queue"):
        InProcessWorker(queues=[])
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="concurrency must be a positive integer"):
            InProcessWorker(queues=["default"], concurrency=bad)  # type: ignore[arg-type]
    w = InProcessWorker(queues=["default"])
    with pytest.raises(RuntimeError, match="not running"):
        w.run_until(lambda: True)
    w.stop()  # never started: nothing to do


@pytest.mark.cogworker_redis
def test_run_until_says_what_did_not_happen_and_starts_once(r):
    with InProcessWorker(queues=["default"], concurrency=1) as w:
        with pytest.raises(TimeoutError, match="nothing came"):
            w.run_until(lambda: r.get("never"), timeout=0.2, message="nothing came")
        assert w.run_until(lambda: 42) == 42
        with pytest.raises(RuntimeError, match="already started"):
            w.start()
        with pytest.raises(ZeroDivisionError):
            w.run_until(lambda: 1 / 0)
