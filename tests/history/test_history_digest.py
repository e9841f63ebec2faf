"""api.History.digest: per-job statistics and per-minute trends aggregated in Redis
(lua/history_digest.lua), kept up to date incrementally, the stream's trimming followed
so that the numbers stay those of the retained runs."""

from __future__ import annotations

import threading
import time

import pytest

from cogworker_django import history
from cogworker_django.api import History
from cogworker_django.api import history as api_history
from cogworker_django.history import background
from cogworker_django.store import keys, runtime


@pytest.fixture(autouse=True)
def clean():
    history.buffer.clear()
    runtime.current().of(api_history.DigestStates).clear()
    yield
    history.buffer.clear()
    runtime.current().of(api_history.DigestStates).clear()


def record(job: str, durations: list[float], failed_every: int = 0, wait: float = 0.5) -> None:
    now = time.time()
    for i, d in enumerate(durations, 1):
        exc = ValueError("x") if failed_every and i % failed_every == 0 else None
        payload = {"jid": f"{job}-{i}", "func": job, "enqueued_at": now - wait}
        history.buffer.add(history.capture(payload, "default", now, d, exc))
    history.flush()


def exact(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    return ordered[max(1, -(-len(ordered) * pct // 100)) - 1]


def test_per_job_statistics():
    a = [i / 1000 for i in range(1, 1001)]  # 1 ms .. 1 s
    record("app.jobs.a", a, failed_every=4)
    record("app.jobs.b", [2.0] * 10)
    d = History().digest()
    assert [j.job for j in d.jobs] == ["app.jobs.a", "app.jobs.b"]
    ja, jb = d.jobs
    assert (ja.runs, ja.failed, ja.failure_rate) == (1000, 250, 0.25)
    assert ja.mean == pytest.approx(sum(a) / len(a))
    for pct, got in ((50, ja.p50), (95, ja.p95), (99, ja.p99)):
        assert got == pytest.approx(exact(a, pct), rel=0.025)
    assert jb.p50 == pytest.approx(2.0, rel=0.025) and jb.failed == 0


def test_zero_durations_and_an_empty_history():
    assert History().digest().jobs == []
    record("app.jobs.z", [0.0, 0.0, 0.0])
    (z,) = History().digest().jobs
    assert (z.p50, z.p99, z.mean) == (0.0, 0.0, 0.0)


def test_trends_by_minute():
    record("app.jobs.a", [0.2] * 30, failed_every=3, wait=1.5)
    d = History().digest()
    hour = d.trend(60)
    assert len(hour) == 60
    assert sum(m.runs for m in hour) == 30 and sum(m.failed for m in hour) == 10
    busy = [m for m in hour if m.runs]
    assert all(m.mean_duration == pytest.approx(0.2) for m in busy)
    assert all(m.mean_wait == pytest.approx(1.5, abs=0.05) for m in busy)
    day = d.trend(1440, 30)
    assert len(day) == 48 and sum(m.runs for m in day) == 30


def test_refreshes_read_only_what_is_new(monkeypatch):
    record("app.jobs.a", [0.1] * 2500)  # more than one slice
    first = History().digest()
    assert first.jobs[0].runs == 2500
    calls = []
    original = api_history.scripts.run

    def counting(name, *args, **kwargs):
        calls.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(api_history.scripts, "run", counting)
    record("app.jobs.b", [0.1] * 5)
    again = History().digest()
    assert {j.job: j.runs for j in again.jobs} == {"app.jobs.a": 2500, "app.jobs.b": 5}
    assert calls.count("history_digest") == 1  # only the five new runs were read
    assert History().digest(max_age=60) is again  # recent enough: Redis not read
    assert calls.count("history_digest") == 1


def test_trimmed_runs_leave_the_statistics(r):
    record("app.jobs.old", [0.1] * 2500)
    assert History().digest().jobs[0].runs == 2500
    record("app.jobs.new", [0.1] * 10)
    r.xtrim(keys.history(), maxlen=1000, approximate=False)  # exact: 1990 of the old runs go
    d = History().digest()
    assert {j.job: j.runs for j in d.jobs} == {"app.jobs.old": 990, "app.jobs.new": 10}
    r.delete(keys.history())
    assert History().digest().jobs == []


def test_a_replaced_stream_is_read_again(r):
    record("app.jobs.a", [0.1] * 3)
    History().digest()
    r.delete(keys.history())
    r.xadd(keys.history(), {"run": '{"jid":"x","job":"app.jobs.c","status":"success"}'}, id="1-1")
    assert [j.job for j in History().digest().jobs] == ["app.jobs.c"]


def test_in_the_background_the_first_reading_returns_none_until_done():
    record("app.jobs.a", [0.1] * 3)
    assert History().digest(wait=False) is None
    from ..helpers import wait_until

    d = wait_until(lambda: History().digest(max_age=60, wait=False), 10, message="digest")
    assert d.jobs[0].runs == 3


def _held_at_a_gate(monkeypatch):
    """The digest's reading waits at a gate (Redis is still read, once it opens)."""
    gate, entered = threading.Event(), threading.Event()
    original = api_history.scripts.run

    def gated(name, *args, **kwargs):
        if name == "history_digest":
            entered.set()
            assert gate.wait(10)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(api_history.scripts, "run", gated)
    return gate, entered


def _digest_threads():
    return [t for t in threading.enumerate() if t.name == background.THREAD_NAME]


def test_the_background_reading_is_the_history_packages_one_thread(monkeypatch):
    record("app.jobs.a", [0.1] * 3)
    gate, entered = _held_at_a_gate(monkeypatch)
    assert History().digest(wait=False) is None
    assert entered.wait(10)
    builds = background.builds()
    assert builds.running(keys.history())
    # Asked again while it reads: no second thread.
    assert History().digest(wait=False) is None and History().digest(wait=False) is None
    assert len(_digest_threads()) == 1
    gate.set()
    assert builds.wait(keys.history(), 10)
    assert _digest_threads() == []
    assert History().digest(max_age=60, wait=False).jobs[0].runs == 3


def test_a_failed_background_reading_is_reported_and_tried_again(monkeypatch, caplog):
    record("app.jobs.a", [0.1] * 2)
    original = api_history.scripts.run
    failures = []

    def failing_once(name, *args, **kwargs):
        if name == "history_digest" and not failures:
            failures.append(name)
            raise ValueError("a broken reply")
        return original(name, *args, **kwargs)

    monkeypatch.setattr(api_history.scripts, "run", failing_once)
    assert History().digest(wait=False) is None
    assert background.builds().wait(keys.history(), 10)
    assert "History digest" in caplog.text and "a broken reply" in caplog.text
    assert History().digest(wait=False) is None  # the next ask starts another
    assert background.builds().wait(keys.history(), 10)
    assert History().digest(max_age=60, wait=False).jobs[0].runs == 2


def test_a_history_key_of_the_wrong_type_reads_as_empty(r):
    r.set(keys.history(), "x")
    assert History().digest().jobs == []
