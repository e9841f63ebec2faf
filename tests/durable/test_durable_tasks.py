"""The django.tasks backend with ``OPTIONS: {"DURABLE": True}``: a task is an outbox row
in the caller's transaction (the default database: where the routers send the model)."""

from __future__ import annotations

import json

import django
import pytest
from django.db import transaction

from cogworker_django.models import OutboxEntry
from cogworker_django.store import keys

pytestmark = [
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks arrived in Django 6.0"),
    pytest.mark.django_db(transaction=True),
]


def queued(r):
    return [json.loads(raw) for raw in r.lrange(f"{keys.prefix()}:queue:default", 0, -1)]


def test_a_durable_task_commits_with_the_data_and_its_result_follows(r):
    from django.tasks import TaskResultStatus
    from testapp import tasks as tt

    with transaction.atomic():
        result = tt.add.using(backend="durable").enqueue(1, 2)
        assert [row.jid for row in OutboxEntry.objects.all()] == [result.id]
        assert queued(r) == []
    assert [j["jid"] for j in queued(r)] == [result.id]
    assert OutboxEntry.objects.count() == 0
    assert tt.add.using(backend="durable").get_result(result.id).status == TaskResultStatus.READY


def test_a_rolled_back_durable_task_is_never_pushed(r):
    from testapp import tasks as tt

    with pytest.raises(RuntimeError), transaction.atomic():
        tt.add.using(backend="durable").enqueue(1, 2)
        raise RuntimeError
    assert OutboxEntry.objects.count() == 0
    assert queued(r) == []


def test_durable_must_be_a_boolean():
    from django.tasks.exceptions import InvalidTaskBackend

    from cogworker_django.tasks_backend import CogworkerBackend

    with pytest.raises(InvalidTaskBackend, match="DURABLE"):
        CogworkerBackend("bad", {"QUEUES": [], "OPTIONS": {"DURABLE": "yes"}})
