"""The stored result (tasks/store.py, lua/task_result.lua): each write's rules, and the
end write that waits for Redis rather than being lost (Django 6.0+)."""

import json
import logging
import time

import pytest
import redis

pytest.importorskip("django.tasks")

from django.tasks import TaskResultStatus  # noqa: E402
from testapp import tasks as tt  # noqa: E402

from cogworker_django.core import payload  # noqa: E402
from cogworker_django.djtasks import lifecycle, store  # noqa: E402
from cogworker_django.store import keys  # noqa: E402


def task_job(**extra):
    return payload.build(
        "testapp.tasks.add", [1, 2], queue="default", kind="task", backend="default", **extra
    )


def stored(job):
    data = store.read(job["jid"])
    for field in ("errors", "worker_ids"):
        data[field] = json.loads(data.get(field, "[]"))
    return data


def end(job, token, **kwargs):
    kwargs.setdefault("status", store.SUCCESSFUL)
    return store.finish(job, token=token, worker_id="w1", started=100.0, **kwargs)


def test_create_never_overwrites_what_a_worker_wrote():
    job = task_job()
    store.start(job, token="a", worker_id="w1", at=100.0)
    store.create(job)  # the enqueuer's write arriving after the worker's
    assert stored(job)["status"] == "RUNNING"


def test_a_retried_write_is_applied_once():
    job = task_job()
    store.create(job)
    first = store.start(job, token="a", worker_id="w1", at=100.0)
    assert store.start(job, token="a", worker_id="w1", at=100.0) is None  # already applied
    assert json.loads(first["worker_ids"]) == ["w1"]
    error = {"exception_class_path": "builtins.ValueError", "traceback": "ValueError: x\n"}
    for _ in range(2):
        end(job, "a", status=store.READY, error=error)
    data = stored(job)
    assert data["worker_ids"] == ["w1"] and data["errors"] == [error]
    assert data["status"] == "READY" and data["started_at"] == store.iso(100.0)


def test_an_end_whose_start_never_landed_counts_the_run():
    job = task_job()
    store.create(job)
    end(job, "a", finished=101.0, return_json="3")
    data = stored(job)
    assert data["worker_ids"] == ["w1"] and data["status"] == "SUCCESSFUL"
    assert data["started_at"] == data["last_attempted_at"] == store.iso(100.0)
    assert data["finished_at"] == store.iso(101.0) and data["return_value"] == "3"


def test_a_late_end_of_an_older_run_never_overwrites_a_newer_run():
    job = task_job()
    store.start(job, token="old", worker_id="w1", at=100.0)
    store.start(job, token="new", worker_id="w2", at=200.0)  # the retry started meanwhile
    error = {"exception_class_path": "builtins.OSError", "traceback": "OSError\n"}
    end(job, "old", status=store.READY, error=error)  # the old run's deferred end
    data = stored(job)
    assert data["status"] == "RUNNING" and data["errors"] == [error]
    assert data["worker_ids"] == ["w1", "w2"]
    assert data["last_attempted_at"] == store.iso(200.0)
    store.finish(job, token="new", worker_id="w2", started=200.0, status=store.SUCCESSFUL)
    assert stored(job)["status"] == "SUCCESSFUL"


def test_a_missing_result_is_rebuilt_from_the_payload(r):
    job = task_job(priority=4)
    r.hset(keys.process("w1"), "beat", time.time())  # w1 is alive: it runs the task
    store.start(job, token="a", worker_id="w1", at=100.0)  # no create: it failed, or expired
    result = tt.add.get_result(job["jid"])
    assert result.status == TaskResultStatus.RUNNING
    assert result.args == [1, 2] and result.task.priority == 4
    assert result.worker_ids == ["w1"] and result.enqueued_at is not None


def test_ttl_covers_the_wait_for_a_retry(r):
    job = task_job()
    end(job, "a", status=store.READY, extra_ttl=1000)
    assert 86400 + 990 < r.ttl(keys.result(job["jid"])) <= 86400 + 1000


def test_an_unrunnable_task_is_failed_without_a_run():
    job = task_job()
    store.create(job)
    lifecycle.unrunnable(job, "it is not a django.tasks Task")
    lifecycle.unrunnable(job, "it is not a django.tasks Task")  # the same filing, once
    data = stored(job)
    assert data["status"] == "FAILED" and data["worker_ids"] == []
    assert "started_at" not in data and "finished_at" in data
    assert [e["exception_class_path"] for e in data["errors"]] == [
        "cogworker_django.jobs.NotRegistered"
    ]


def test_an_end_write_waits_for_redis_and_lands_once(redis_server, configure, monkeypatch):
    server = redis_server()
    configure(REDIS_URL=server.url)
    monkeypatch.setattr(store, "END_RETRY_PAUSES", (0.01,))
    job = task_job()
    store.start(job, token="a", worker_id="w1", at=100.0)
    server.stop()
    assert end(job, "a", finished=101.0, return_json="3") is False  # deferred, not raised
    assert len(store.pending().pending()) == 1
    # Still away: the outage itself is raised (the beat reports it).
    with pytest.raises(redis.ConnectionError, match=f":{server.port}\\b"):
        store.retry_pending()
    assert len(store.pending().pending()) == 1
    server.start()  # an empty Redis: the write rebuilds the result from the payload
    store.retry_pending()
    assert store.pending().pending() == {}
    data = stored(job)
    assert data["status"] == "SUCCESSFUL" and data["return_value"] == "3"
    assert data["worker_ids"] == ["w1"] and data["task"] == "testapp.tasks.add"


def test_a_result_key_of_the_wrong_type_is_logged_not_retried(r, caplog):
    job = task_job()
    r.set(keys.result(job["jid"]), "not a hash")
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        assert store.start(job, token="a", worker_id="w1", at=100.0) is None
        assert end(job, "a") is False
    assert store.pending().pending() == {}
    assert "WRONGTYPE" in caplog.text
