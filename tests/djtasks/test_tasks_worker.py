"""django.tasks through a real worker, in this process: results, failures, context, async,
run_after, signals, expiry, and tasks a worker must refuse to run (Django 6.0+). (A run
handed back by TERM or SIGKILL: tests/djtasks/test_tasks_faults.py.)"""

import datetime as dt
import json

import pytest

pytest.importorskip("django.tasks")

from asgiref.sync import async_to_sync  # noqa: E402
from django.tasks import TaskResultStatus  # noqa: E402
from django.tasks.exceptions import TaskResultDoesNotExist  # noqa: E402
from django.utils.module_loading import import_string  # noqa: E402
from testapp import tasks as tt  # noqa: E402

from cogworker_django import NotRegistered  # noqa: E402
from cogworker_django.core import client, payload  # noqa: E402
from cogworker_django.djtasks import store  # noqa: E402
from cogworker_django.store import keys  # noqa: E402

from ..helpers import wait_until  # noqa: E402

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]


def finished(result, timeout=15.0):
    def done():
        result.refresh()
        return result.is_finished

    wait_until(done, timeout, message=f"task {result.task.name} ({result.id}) to finish")
    return result


def dead_jobs(r):
    return {
        j["jid"]: j for j in map(json.loads, r.zrange(keys.dead(keys.home_of("default")), 0, -1))
    }


def signals(r, result_id):
    """``kind:attempt:status`` of the signals the worker sent for ``result_id``."""
    found = []
    for entry in r.lrange(tt.test_key("signals"), 0, -1):
        kind, task_id, attempt, status = entry.split(":")
        if task_id == result_id:
            found.append(f"{kind}:{attempt}:{status}")
    return found


def test_tasks_run_with_results_context_async_and_signals(inworker, r):
    added = tt.add.enqueue(2, 3)
    echoed = tt.echo.enqueue(1, (2, 3), x={"y": None})
    async_added = tt.async_add.enqueue(3, 4)
    own_id = tt.get_task_id.enqueue()
    flaky = tt.flaky.enqueue(fail_times=1)  # default alias: retries on (fast backoff here)
    w = inworker()

    for result in (added, echoed, async_added, own_id, flaky):
        finished(result)
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    identity = w.identity

    assert added.return_value == 5
    assert added.worker_ids == [identity] and added.attempts == 1
    assert added.enqueued_at <= added.started_at <= added.finished_at
    assert added.last_attempted_at == added.started_at
    assert added.errors == []
    assert echoed.return_value == {"args": [1, [2, 3]], "kwargs": {"x": {"y": None}}}
    assert echoed.args == [1, [2, 3]] and echoed.kwargs == {"x": {"y": None}}
    assert async_added.return_value == 7
    assert own_id.return_value == own_id.id

    # takes_context: attempt counts runs; the failed first run is in errors and worker_ids.
    value = flaky.return_value
    assert value["attempt"] == 2 and value["id"] == flaky.id
    assert value["worker_ids"] == [identity, identity] and value["errors"] == [
        "builtins.RuntimeError"
    ]
    assert flaky.attempts == 2 and len(flaky.errors) == 1
    assert flaky.errors[0].exception_class is RuntimeError
    assert flaky.started_at < flaky.last_attempted_at <= flaky.finished_at

    # Django's signals, sent in the worker (testapp.tasks records them).
    assert signals(r, added.id) == ["started:1:RUNNING", "finished:1:SUCCESSFUL"]
    assert signals(r, flaky.id) == [
        "started:1:RUNNING",
        "finished:1:READY",  # the first run failed; a retry is due
        "started:2:RUNNING",
        "finished:2:SUCCESSFUL",
    ]

    # get_result from anywhere, sync and async; a result of another task is a mismatch.
    assert tt.add.get_result(added.id).return_value == 5
    again = async_to_sync(tt.async_add.aget_result)(async_added.id)
    assert again.return_value == 7 and again.task == async_added.task
    from django.tasks.exceptions import TaskResultMismatch

    with pytest.raises(TaskResultMismatch):
        tt.echo.get_result(added.id)


def test_failures_are_failed_with_the_exception_path(inworker, r):
    boom = tt.boom.using(backend="noretry").enqueue("kaboom")
    exits = tt.exits.using(backend="noretry").enqueue()
    twice = tt.boom.using(backend="retry1").enqueue("again")
    not_json = tt.returns_object.enqueue("obj")  # default alias: 25 retries, yet none here
    inworker()

    finished(boom)
    assert boom.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in boom.errors] == ["builtins.ValueError"]
    assert boom.errors[0].exception_class is ValueError
    assert boom.errors[0].traceback.endswith("ValueError: kaboom\n")
    with pytest.raises(ValueError, match="Task failed"):
        boom.return_value  # noqa: B018 - the property raises
    assert boom.attempts == 1 and boom.finished_at >= boom.started_at

    finished(exits)
    assert exits.status == TaskResultStatus.FAILED
    assert exits.errors[0].exception_class is SystemExit
    assert exits.errors[0].traceback.endswith("SystemExit: This task failed due to SystemExit\n")

    finished(twice)
    assert twice.status == TaskResultStatus.FAILED
    assert twice.attempts == 2 and len(twice.errors) == 2  # each run shows in worker_ids

    finished(not_json)
    assert not_json.status == TaskResultStatus.FAILED
    assert not_json.errors[0].exception_class is TypeError
    assert "returned a object, which is not JSON-serialisable" in not_json.errors[0].traceback
    assert "Unsupported type" in not_json.errors[0].traceback
    assert not_json.attempts == 1 and r.hget(tt.test_key("runs"), "obj") == "1"

    dead = wait_until(lambda: len(dead_jobs(r)) == 4 and dead_jobs(r), 10, message="4 dead")
    assert set(dead) == {boom.id, exits.id, twice.id, not_json.id}
    assert dead[boom.id]["kind"] == "task" and dead[boom.id]["func"] == "testapp.tasks.boom"
    assert dead[not_json.id]["retry"] is False


def test_run_after_is_never_early(inworker, r):
    run_after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1.5)
    result = tt.add.using(run_after=run_after).enqueue(1, 1)
    assert (
        r.zcard(keys.schedule(keys.home_of("default"))) == 1 and r.llen(keys.queue("default")) == 0
    )
    assert tt.add.get_result(result.id).status == TaskResultStatus.READY
    assert r.ttl(keys.result(result.id)) > 86400  # kept until it runs, then RESULT_TTL
    inworker()
    finished(result)
    assert result.return_value == 2
    assert result.started_at >= run_after
    assert result.task.run_after == run_after


def test_results_expire_after_result_ttl(inworker, configure, r):
    configure(RESULT_TTL=1)
    result = tt.record_run.enqueue("ttl")
    assert 0 < r.ttl(keys.result(result.id)) <= 1
    inworker(settings={"RESULT_TTL": 1})
    wait_until(lambda: r.hget(tt.test_key("runs"), "ttl") == "1", 10, message="the run")

    def gone():
        try:
            tt.record_run.get_result(result.id)
        except TaskResultDoesNotExist:
            return True
        return False

    wait_until(gone, 10, message="the result to expire")


def _forged(func, token, backend="default"):
    job = payload.build(func, [token], queue="default", kind="task", backend=backend, priority=0)
    client.push(job)
    store.create(job)
    return job["jid"]


def test_a_worker_runs_nothing_but_cogworker_tasks(inworker, r):
    forged = {
        _forged("testapp.tasks.plain_function", "plain"): "is not a django.tasks Task",
        _forged("testapp.tasks.immediate_record", "immediate"): "is not a CogworkerBackend",
        _forged("testapp.never_imported.sneaky", "sneaky"): "is not imported",
        _forged("testapp.jobs.record", "job"): "is not a django.tasks Task",
        _forged("testapp.tasks.add", "alias", backend="immediate"): "is not a CogworkerBackend",
    }
    real = tt.record_run.enqueue("real")
    inworker()
    finished(real)
    dead = wait_until(lambda: len(dead_jobs(r)) == len(forged) and dead_jobs(r), 10, message="dead")
    assert set(dead) == set(forged)
    assert all(j["error_class"] == "NotRegistered" for j in dead.values())
    assert r.hgetall(tt.test_key("runs")) == {"real": "1"}  # nothing forged was called
    assert not r.exists(tt.test_key("imported"))  # nor its module imported
    for jid, why in forged.items():
        data = store.read(jid)
        assert data["status"] == "FAILED", data
        error = json.loads(data["errors"])[0]
        assert error["exception_class_path"] == "cogworker_django.jobs.NotRegistered"
        assert import_string(error["exception_class_path"]) is NotRegistered
        assert why in error["traceback"]
        assert json.loads(data["worker_ids"]) == []  # it never ran


def test_a_failed_task_keeps_djangos_records_and_the_worker_adds_one_line(inworker, worker_log, r):
    """Django's own records on its django.tasks logger stay as Django's backends emit them
    (state=RUNNING, and state=FAILED with the traceback: users' logging listens to them;
    their levels: tests/djtasks/django_tasks/); the worker's own line ("failed: ... ->
    dead") comes once, without a traceback."""
    result = tt.boom.using(backend="noretry").enqueue("kaput")
    worker_log.listen("django.tasks")  # as Django's own logging shows it in a worker
    w = inworker()
    finished(result)
    w.stop()
    log = worker_log.log()
    assert log.count(f"(jid {result.id}) failed: ValueError: kaput -> dead") == 1
    assert f"Task id={result.id} path=testapp.tasks.boom state=RUNNING" in log
    assert log.count(f"Task id={result.id} path=testapp.tasks.boom state=FAILED") == 1
    # Django's record carries the traceback; the worker's line does not repeat it.
    assert log.count("Traceback (most recent call last)") == 1, log
