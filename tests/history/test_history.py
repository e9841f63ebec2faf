"""Run history: recorded by a real worker, buffered, written in batches, read back."""

from __future__ import annotations

import json
import time

import pytest
import redis
from testapp import jobs as tj

from cogworker_django import history
from cogworker_django.api import history as history_api
from cogworker_django.core import client, payload
from cogworker_django.core.middleware import Reschedule
from cogworker_django.store import keys, scripts

from ..helpers import free_port, wait_until


def _run(job="app.jobs.f", status="success", started_at=None, duration=0.1, **extra):
    exc = ValueError("bad") if status == "failed" else None
    run = history.capture(
        {"jid": payload.new_jid(), "func": job, **extra},
        "default",
        started_at if started_at is not None else time.time(),
        duration,
        exc,
    )
    history.buffer.add(run)
    return history.as_dict(run, history.buffer.worker)


# With a real worker --------------------------------------------------------------------------


def test_worker_records_success_and_failure_with_every_field(inworker, r, prefix):
    w = inworker()
    before = time.time()
    ok_jid = tj.record.enqueue("h1")
    dead_jid = tj.fails_once_dead.enqueue("it broke")
    periodic_job = payload.build("testapp.jobs.record", ["p1"], periodic="nightly-report")
    client.push(periodic_job)

    def three():
        runs = history_api.query()
        return runs if len(runs) == 3 else None

    runs = {run["jid"]: run for run in wait_until(three, 10, message="three runs in history")}
    identity = w.identity
    ok, failed, periodic = runs[ok_jid], runs[dead_jid], runs[periodic_job["jid"]]
    assert ok["job"] == "testapp.jobs.record"
    assert ok["queue"] == "default"
    assert ok["status"] == "success"
    assert before - 1 <= ok["started_at"] <= time.time()
    assert 0 <= ok["duration"] < 5
    assert ok["error_class"] is None and ok["error_message"] is None
    assert ok["worker"] == identity
    assert ok["periodic"] is None
    assert failed["status"] == "failed"
    assert failed["job"] == "testapp.jobs.fails_once_dead"
    assert failed["error_class"] == "RuntimeError"
    assert failed["error_message"] == "it broke"
    assert periodic["periodic"] == "nightly-report"
    assert history_api.query(status="failed") == [failed]
    # Both, newest first (which finished first depends on the threads: compare by id).
    successes = history_api.query(job="testapp.jobs.record", status="success", count=10)
    assert sorted(successes, key=lambda run: run["jid"]) == sorted(
        [periodic, ok], key=lambda run: run["jid"]
    )
    ids = [tuple(map(int, run["id"].split("-"))) for run in successes]
    assert ids == sorted(ids, reverse=True)
    s = history_api.summary("testapp.jobs.fails_once_dead")
    assert s["count"] == 1 and s["failure_rate"] == 1.0
    w.stop()


def test_runs_finishing_during_shutdown_are_written(inworker, r, prefix):
    w = inworker()
    tj.slow.enqueue(2.0, "late")
    wait_until(lambda: r.hlen(f"{prefix}:work:{w.identity}"), 5)
    # Stopped while the job runs: the flusher stops at once, the job finishes a second
    # later (within SHUTDOWN_TIMEOUT), and the History plugin's exit writes its run.
    w.stop()
    runs = history_api.query()
    assert [(run["job"], run["status"]) for run in runs] == [("testapp.jobs.slow", "success")]


def test_history_false_records_nothing(inworker, r, prefix):
    w = inworker(settings={"HISTORY": False})
    tj.record.enqueue("x")
    wait_until(lambda: r.hget(f"{prefix}:test:runs", "x") == "1", 10)
    w.stop()
    assert not r.exists(keys.history())


def test_history_key_of_the_wrong_type_loses_history_never_a_job(inworker, worker_log, r, prefix):
    r.set(keys.history(), "not a stream")
    w = inworker(settings={"KEYGUARD_INTERVAL": 600})  # only the boot check
    worker_log.wait_for_log(r"Key guard: \S+:history held a string, not a stream")
    r.delete(keys.history())
    r.set(keys.history(), "wrong again")  # after the boot check: history writes fail now
    tj.record.enqueue_many([(f"j{i}",) for i in range(20)])
    wait_until(lambda: r.hlen(f"{prefix}:test:runs") == 20, 10, message="20 runs")
    worker_log.wait_for_log(
        r"History failed: .*run record\(s\) dropped, next write in 5s.*WRONGTYPE"
    )
    assert set(r.hvals(f"{prefix}:test:runs")) == {"1"}
    assert r.get(keys.history()) == "wrong again"
    assert r.zcard(f"{prefix}:dead") == 0 and r.zcard(f"{prefix}:retry") == 0
    # Once the key is fixed, history resumes after the backoff.
    r.delete(keys.history())
    tj.record.enqueue("after")
    wait_until(lambda: history_api.query(), 10, message="history written again")
    w.stop()
    assert worker_log.log().count("run record(s) dropped") == 1


# In this process: the middleware, the buffer, the writer --------------------------------------


def test_middleware_records_a_broken_exception_and_reraises_it():
    mw = history.HistoryMiddleware()
    job = {"jid": "j1", "func": "x.y", "periodic": "p"}

    def boom():
        raise tj.BrokenStr()

    with pytest.raises(tj.BrokenStr):
        mw(job, "low", boom)
    assert mw(job, "low", lambda: 42) == 42
    failed, ok = (history.as_dict(run, "w") for run in history.buffer.take(10))
    assert failed["status"] == "failed"
    assert failed["error_class"] == "testapp.jobs.BrokenStr"
    assert "str() raised" in failed["error_message"]
    assert (failed["queue"], failed["periodic"]) == ("low", "p")
    assert ok["status"] == "success"


def test_reschedule_is_not_a_run():
    mw = history.HistoryMiddleware()

    def resched():
        raise Reschedule(5)

    with pytest.raises(Reschedule):
        mw({"jid": "j", "func": "f"}, "default", resched)
    assert len(history.buffer) == 0


def test_disabled_middleware_records_nothing(configure):
    configure(HISTORY_MAX_RUNS=0)
    assert history.HistoryMiddleware()({"jid": "j", "func": "f"}, "q", lambda: 1) == 1
    assert len(history.buffer) == 0


def test_buffer_is_capped_and_the_loss_logged(monkeypatch, caplog, r):
    monkeypatch.setattr(history.recorder, "MAX_BUFFERED", 5)
    for _ in range(8):
        _run()
    assert len(history.buffer) == 5 and history.buffer.dropped == 3
    assert history.flush() == 5
    assert "3 run(s) not recorded" in caplog.text
    assert r.xlen(keys.history()) == 5


def test_flush_writes_in_batches_capped_by_max_runs(configure, r):
    configure(HISTORY_MAX_RUNS=10)
    for _ in range(1000):
        _run()
    assert history.flush() == 1000
    # MAXLEN ~ trims whole stream nodes (100 entries each by default).
    assert 10 <= r.xlen(keys.history()) <= 110
    assert len(history.buffer) == 0


def test_flush_writes_each_run_as_one_entry_whatever_its_text_holds(r):
    """The batch goes to the script as one argument, a record a line: a message with
    line breaks, quotes or non-ASCII text is still one entry, read back as written."""
    messages = ["two\nlines", 'a "quote" and \\n', "é\r\n\u2028", "", "x" * 5000]
    written = []
    for message in messages:
        run = history.capture(
            {"jid": payload.new_jid(), "func": "app.jobs.f"},
            "q",
            time.time(),
            0.1,
            ValueError(message),
        )
        history.buffer.add(run)
        written.append(history.as_dict(run, history.buffer.worker))
    assert history.flush() == len(messages)
    texts = [fields["run"] for _, fields in r.xrange(keys.history())]
    assert texts == [history.dumps(record) for record in written]  # as written, no more
    assert [json.loads(text) for text in texts] == written


def test_a_message_redis_cant_take_as_utf8_costs_no_other_run(r):
    """A job's exception text with a lone surrogate (bytes decoded with surrogateescape,
    say) can't be sent as UTF-8: it is written with "?" in its place, and the other runs
    of its batch are written too, not dropped with it."""
    for message in ("before", "bad \udc80 byte", "after"):
        history.buffer.add(
            history.capture(
                {"jid": payload.new_jid(), "func": "app.jobs.f"},
                "q",
                time.time(),
                0.1,
                ValueError(message),
            )
        )
    assert history.flush() == 3
    runs = [json.loads(fields["run"]) for _, fields in r.xrange(keys.history())]
    assert [run["error_message"] for run in runs] == ["before", "bad ? byte", "after"]


def test_the_history_script_still_takes_a_record_an_argument(r):
    """Every argument after the cap is read as records, a record a line: one record an
    argument is read alike."""
    records = [
        history.record_text(("j1", "f", "q", "success", 1.5, 0.1, None, None, None, None), "h:1"),
        history.record_text(("j2", "f", "q", "failed", 2.5, 0.1, "E", "m", None, None), "h:1"),
    ]
    assert scripts.run("history_add", r, [keys.history()], [100, *records]) == 2
    assert [fields["run"] for _, fields in r.xrange(keys.history())] == records


def test_flush_while_redis_is_unreachable_keeps_the_runs(configure):
    configure(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    runs = [_run() for _ in range(3)]
    assert history.flush_safely() is False
    kept = [history.as_dict(run, history.buffer.worker) for run in history.buffer.take(10)]
    assert kept == runs  # kept, in order, for the next flush


def test_wrong_type_drops_the_batch_and_backs_off(r):
    r.set(keys.history(), "x")
    _run()
    with pytest.raises(redis.ResponseError, match="dropped, next write in 5s"):
        history.flush()
    assert len(history.buffer) == 0
    _run()
    assert history.flush() == 0  # backing off: nothing tried
    assert len(history.buffer) == 1
    r.delete(keys.history())
    history.current_writer().reset()
    assert history.flush() == 1


# Reading -----------------------------------------------------------------------------------


def test_query_filters_and_pages():
    now = time.time()
    a_ok = [_run("a", started_at=now - 100 + i) for i in range(5)]
    a_failed = _run("a", "failed", started_at=now - 50)
    b_ok = _run("b", started_at=now - 10)
    history.flush()
    jids = lambda runs: [x["jid"] for x in runs]  # noqa: E731
    assert jids(history_api.query()) == [b_ok["jid"], a_failed["jid"], *reversed(jids(a_ok))]
    assert jids(history_api.query(job="a", status="success")) == list(reversed(jids(a_ok)))
    assert jids(history_api.query(status="failed")) == [a_failed["jid"]]
    assert jids(history_api.query(since=now - 60)) == [b_ok["jid"], a_failed["jid"]]
    assert jids(history_api.query(until=now - 97.5)) == [
        a_ok[2]["jid"],
        a_ok[1]["jid"],
        a_ok[0]["jid"],
    ]
    assert jids(history_api.query(job="a", start=2, count=2)) == [a_ok[3]["jid"], a_ok[2]["jid"]]
    assert history_api.query(job="nope") == []
    newest = history_api.query(count=1)[0]
    assert newest.pop("id")
    assert newest == b_ok  # every field comes back as it went in


def test_entries_not_written_by_history_read_as_blanks(r):
    r.xadd(keys.history(), {"run": "not json"})
    r.xadd(keys.history(), {"run": "[1, 2]"})
    r.xadd(keys.history(), {"job": "by.hand", "status": "failed", "duration": "x"})
    runs = history_api.query()
    assert [(run["job"], run["status"], run["duration"]) for run in runs] == [("", "", None)] * 3
    assert history_api.query(job="by.hand") == []
    s = history_api.summary()
    assert (s["count"], s["failed"], s["p50"]) == (3, 0, None)


def test_query_and_summary_read_past_one_slice(monkeypatch):
    monkeypatch.setattr(history_api, "READ_BATCH", 7)
    made = [_run("a", "failed" if i % 3 == 0 else "success", duration=i) for i in range(30)]
    _run("b")
    history.flush()
    got = history_api.query(job="a", count=100)
    assert [x["jid"] for x in got] == [m["jid"] for m in reversed(made)]
    s = history_api.summary("a")
    assert (s["count"], s["failed"], s["p99"]) == (30, 10, 29.0)


def test_summary_counts_failure_rate_and_percentiles():
    for i in range(1, 101):
        _run("a", "failed" if i % 4 == 0 else "success", duration=i / 100)
    _run("b", duration=9.0)
    history.flush()
    s = history_api.summary("a")
    assert s["count"] == 100 and s["failed"] == 25
    assert s["failure_rate"] == 0.25
    assert (s["p50"], s["p95"], s["p99"]) == (0.5, 0.95, 0.99)
    assert history_api.summary()["count"] == 101
    assert history_api.summary("b")["p99"] == 9.0
    empty = history_api.summary("nothing")
    assert empty == {
        "count": 0,
        "failed": 0,
        "failure_rate": 0.0,
        "p50": None,
        "p95": None,
        "p99": None,
    }


def test_reading_a_history_key_of_the_wrong_type_is_empty(r):
    r.set(keys.history(), "x")
    assert history_api.query() == []
    assert history_api.summary()["count"] == 0
