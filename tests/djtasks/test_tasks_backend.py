"""CogworkerBackend in the enqueuing process: options, validate_task, enqueue and the
payload it pushes, get_result, signals, system checks, test modes, transactions
(Django 6.0+). Behaviours ported from Django's tests/tasks are marked "Django:"."""

import datetime as dt
import json
from functools import partial

import pytest

pytest.importorskip("django.tasks")

from asgiref.sync import async_to_sync  # noqa: E402
from django.db import transaction  # noqa: E402
from django.tasks import TaskResultStatus, default_task_backend, task, task_backends  # noqa: E402
from django.tasks.exceptions import (  # noqa: E402
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.tasks.signals import task_enqueued  # noqa: E402
from django.test import override_settings  # noqa: E402
from testapp import tasks as tt  # noqa: E402

from cogworker_django import testing  # noqa: E402
from cogworker_django.djtasks import store  # noqa: E402
from cogworker_django.store import keys  # noqa: E402
from cogworker_django.tasks_backend import CogworkerBackend  # noqa: E402

from ..helpers import free_port  # noqa: E402

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]

BACKEND = "cogworker_django.tasks_backend.CogworkerBackend"


def queued(r, queue="default"):
    return [json.loads(p) for p in r.lrange(keys.queue(queue), 0, -1)]


def test_backend_flags_and_options():
    backend = task_backends["default"]
    assert isinstance(backend, CogworkerBackend) and backend.alias == "default"
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
    assert backend.options == {} and backend.retry is True  # Django: test_using_correct_backend
    assert task_backends["noretry"].retry == 0 and task_backends["retry1"].retry == 1


@pytest.mark.parametrize(
    "params, message",
    [
        ({"OPTIONS": {"RETRY": -1}}, "RETRY'] = -1 is invalid"),
        ({"OPTIONS": {"RETRY": "5"}}, "RETRY'] = '5' is invalid"),
        ({"OPTIONS": {"RETYR": 1}}, "unknown key(s) ['RETYR']"),
        ({"OPTIONS": []}, "'OPTIONS'] must be a dict"),
        ({"QUEUES": ["ok", "not ok"]}, "invalid queue name(s) ['not ok']"),
    ],
)
def test_bad_backend_settings_name_the_setting(params, message):
    with override_settings(TASKS={"bad": {"BACKEND": BACKEND, **params}}):
        with pytest.raises(InvalidTaskBackend) as info:
            task_backends["bad"]
    assert message in str(info.value) and "TASKS['bad']" in str(info.value)


def test_enqueue_pushes_a_task_payload_and_returns_a_ready_result(r):
    result = tt.echo.enqueue(1, (2,), two=3)
    # Django: test_enqueue_task - READY, the task, arguments normalised to JSON types.
    assert result.status == TaskResultStatus.READY
    assert result.task == tt.echo and result.backend == "default"
    assert result.args == [1, [2]] and result.kwargs == {"two": 3}
    assert result.enqueued_at is not None and result.started_at is None
    assert result.worker_ids == [] and result.errors == []
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018 - the property raises
    [job] = queued(r)
    assert job["jid"] == result.id and job["kind"] == "task"
    assert job["func"] == "testapp.tasks.echo" == tt.echo.module_path
    assert job["args"] == [1, [2]] and job["kwargs"] == {"two": 3}
    assert (job["queue"], job["priority"], job["backend"], job["retry"]) == (
        "default",
        0,
        "default",
        True,
    )
    # The stored result: READY, for RESULT_TTL; get_result gives it back equal.
    assert r.hget(keys.result(result.id), "status") == "READY"
    assert 86390 < r.ttl(keys.result(result.id)) <= 86400
    assert tt.echo.get_result(result.id) == result  # Django: test_get_result
    again = async_to_sync(tt.echo.aget_result)(result.id)  # Django: test_get_result_async
    assert again == result


def test_aenqueue_and_options_of_using(r):
    result = async_to_sync(tt.add.using(queue_name="low", priority=-3).aenqueue)(2, 2)
    assert result.status == TaskResultStatus.READY and result.task.queue_name == "low"
    member, score = r.zrange(keys.priority_queue("low"), 0, -1, withscores=True)[0]
    assert score == 3.0 and json.loads(member.partition("|")[2])["jid"] == result.id
    loaded = tt.add.get_result(result.id)
    assert loaded.task.priority == -3 and loaded.task.queue_name == "low"
    no_retry = tt.add.using(backend="noretry").enqueue(1, 1)
    assert queued(r)[0]["retry"] == 0 and no_retry.backend == "noretry"


def test_arguments_must_be_json(r):
    # Django: test_enqueue_with_invalid_argument (and its async twin).
    with pytest.raises(TypeError, match="Unsupported type"):
        tt.add.enqueue(dt.datetime.now(), 1)
    with pytest.raises(TypeError, match="Unsupported type"):
        async_to_sync(tt.add.aenqueue)(1, b=object())
    assert not r.exists(keys.queue("default"))


def test_validate_task_rules():
    # Django: test_invalid_priority, test_unknown_queue_name, test_naive_datetime,
    # test_takes_context_without_taking_context, test_invalid_function.
    for bad in (-101, 101, 3.1):
        with pytest.raises(InvalidTask, match="priority must be a whole number"):
            tt.add.using(priority=bad)
    for ok in (-100, 0, 100):
        tt.add.using(priority=ok)
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid for backend"):
        tt.add.using(queue_name="nope")
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        tt.add.using(run_after=dt.datetime.now())
    with pytest.raises(InvalidTask, match="first argument of 'context'"):
        task(takes_context=True)(tt.add.func)
    with pytest.raises(InvalidTask, match="module level"):
        task()(lambda: None)
    # Ours: a task declared for another backend can't be re-routed to cogworker workers.
    with pytest.raises(InvalidTask, match="declared for the task backend 'immediate'"):
        tt.immediate_record.using(backend="default")
    # Ours: with QUEUES = [] Django accepts any queue; a cogworker queue needs a name.
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": []}}):
        assert tt.add.using(queue_name="anything").queue_name == "anything"
        with pytest.raises(InvalidTask, match="not a valid queue name"):
            tt.add.using(queue_name="two words")


def test_unknown_or_unloadable_results_do_not_exist(r):
    # Django: test_get_missing_result.
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("123")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(default_task_backend.aget_result)("123")
    # A stored result naming something that is not a task of ours is not handed out.
    r.hset(keys.result("forged"), mapping={"task": "os.system", "backend": "default"})
    with pytest.raises(TaskResultDoesNotExist, match="is not a django.tasks Task"):
        default_task_backend.get_result("forged")
    r.hset(keys.result("hidden"), mapping={"task": "testapp.never_imported.sneaky"})
    with pytest.raises(TaskResultDoesNotExist, match="is not imported"):
        default_task_backend.get_result("hidden")
    assert not r.exists(tt.test_key("imported"))  # and reading it imported nothing


def test_get_result_of_another_task_is_a_mismatch():
    # Django: test_get_incorrect_result.
    result = tt.async_add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        tt.add.get_result(result.id)


def test_refresh_reads_the_stored_result(r):
    # Django: test_refresh_result (the stored result moves on; refresh follows it).
    result = tt.add.enqueue(20, 22)
    r.hset(keys.result(result.id), mapping={"status": "SUCCESSFUL", "return_value": "42"})
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42
    r.hset(keys.result(result.id), "status", "FAILED")
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.FAILED


def test_task_enqueued_is_sent_with_the_result():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((sender, task_result.id, task_result.status))

    task_enqueued.connect(receiver)
    try:
        result = tt.add.enqueue(1, 2)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(CogworkerBackend, result.id, TaskResultStatus.READY)]


def test_run_after_schedules_and_keeps_the_result_until_then(r):
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    result = tt.add.using(run_after=later).enqueue(1, 1)
    [(raw, at)] = r.zrange(keys.schedule(keys.home_of("default")), 0, -1, withscores=True)
    assert json.loads(raw)["jid"] == result.id and at == pytest.approx(later.timestamp())
    assert r.ttl(keys.result(result.id)) > 86400 + 7000
    assert tt.add.get_result(result.id).task.run_after == later


def test_test_modes_run_tasks_without_redis_results(r):
    with testing.fake():
        result = tt.record_run.enqueue("faked")
        [job] = testing.recorded("testapp.tasks.record_run")
        assert job["kind"] == "task" and job["jid"] == result.id
        assert not r.exists(keys.result(result.id))  # no result write in a test mode
        assert testing.drain() == 1
    assert r.hget(tt.test_key("runs"), "faked") == "1"
    with testing.inline():
        assert tt.get_task_id.enqueue().status == TaskResultStatus.READY


def test_a_push_stopped_by_a_client_middleware_stores_nothing(configure, r):
    configure(
        MIDDLEWARE={"client": ["tests.djtasks.test_tasks_backend.drop_everything"], "server": []}
    )
    result = tt.add.enqueue(1, 2)
    assert result.status == TaskResultStatus.READY
    assert not r.exists(keys.result(result.id), keys.queue("default"))


def drop_everything(job, push):
    return None


def test_check_reports_queues_no_worker_reads_and_never_contacts_redis(configure):
    messages = default_task_backend.check()
    assert {m.id for m in messages} == {"cogworker.tasks.W010"}
    assert sorted(m.msg.split("queue ")[1].split(",")[0] for m in messages) == [
        "'critical'",
        "'low'",
    ]
    # Redis down: not this check's business (Django runs it before every command; the
    # deployment checks report an unreachable Redis as cogworker.E002).
    configure(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0", QUEUES=["default", "low", "critical"])
    assert default_task_backend.check() == []


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_with_djangos_pattern(r):
    """Django's documented pattern: transaction.on_commit(partial(task.enqueue, ...))."""
    with transaction.atomic():
        transaction.on_commit(partial(tt.record_run.enqueue, "committed"))
        assert not r.exists(keys.queue("default"))
    assert [j["args"] for j in queued(r)] == [["committed"]]
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            transaction.on_commit(partial(tt.record_run.enqueue, "rolled back"))
            raise RuntimeError("roll back")
    assert [j["args"] for j in queued(r)] == [["committed"]]
    result_id = queued(r)[0]["jid"]
    assert store.read(result_id)["status"] == "READY"


def test_a_model_instance_passed_to_a_task_is_named(r):
    from django.contrib.auth.models import Group

    group = Group(name="staff")
    with pytest.raises(TypeError, match=r"testapp\.tasks\.echo: positional argument 1 \(Group\)"):
        tt.echo.enqueue(1, group)
    with pytest.raises(TypeError, match=r"keyword argument 'owner' \(Group\)"):
        tt.echo.enqueue(owner=group)
    assert r.llen(keys.queue("default")) == 0
