"""django.tasks tasks the test suite runs in real workers (Django 6.0+ only).

What they do is recorded in Redis under the test's prefix:
- ``<prefix>:test:runs`` (hash, as for testapp.jobs): token -> runs;
- ``<prefix>:test:task_order`` (list): tokens in the order their tasks ran;
- ``<prefix>:test:signals`` (list): ``started:<id>:<attempt>:<status>`` and
  ``finished:<id>:<attempt>:<status>``, from Django's signals sent by a CogworkerBackend.
"""

import asyncio
import time

from django.dispatch import receiver
from django.tasks import task
from django.tasks.signals import task_finished, task_started

from cogworker_django.store import connection, keys
from cogworker_django.tasks_backend import CogworkerBackend


def test_key(name):
    return f"{keys.prefix()}:test:{name}"


def _count(token):
    connection.get_client().hincrby(test_key("runs"), token, 1)


@task
def add(a, b):
    return a + b


@task
def echo(*args, **kwargs):
    return {"args": args, "kwargs": kwargs}


@task
def boom(message="boom"):
    raise ValueError(message)


@task
def exits(message="This task failed due to SystemExit"):
    raise SystemExit(message)


@task(takes_context=True)
def flaky(context, fail_times=1):
    """Fails its first ``fail_times`` attempts, then says what its context held."""
    if context.attempt <= fail_times:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return {
        "attempt": context.attempt,
        "id": context.task_result.id,
        "worker_ids": context.task_result.worker_ids,
        "errors": [e.exception_class_path for e in context.task_result.errors],
    }


@task(takes_context=True)
def get_task_id(context):
    return context.task_result.id


@task
async def async_add(a, b):
    await asyncio.sleep(0.01)
    return a + b


@task
def record_order(token):
    connection.get_client().rpush(test_key("task_order"), token)


@task
def record_run(token):
    _count(token)


@task
def returns_object(token):
    _count(token)
    return object()


@task
def slow_add(seconds, a, b):
    time.sleep(seconds)
    return a + b


@task(backend="immediate")
def immediate_record(token):
    """A task of a backend that isn't a CogworkerBackend: a worker must never run it."""
    _count(token)


def plain_function(token):
    """Not a task: a worker must never call it, whatever a payload says."""
    _count(token)


def _record_signal(kind, task_result):
    connection.get_client().rpush(
        test_key("signals"),
        f"{kind}:{task_result.id}:{task_result.attempts}:{task_result.status}",
    )


@receiver(task_started)
def _on_started(sender, task_result, **kwargs):
    if sender is CogworkerBackend:
        _record_signal("started", task_result)


@receiver(task_finished)
def _on_finished(sender, task_result, **kwargs):
    if sender is CogworkerBackend:
        _record_signal("finished", task_result)


@task
def grumpy():
    """Its task_started receiver raises (below): the task must still run and succeed."""
    return "fine"


@receiver(task_started)
def _raises_for_grumpy(sender, task_result, **kwargs):
    if sender is CogworkerBackend and task_result.task.name == "grumpy":
        raise RuntimeError("this receiver fails")


@task
def slow_first_run(token):
    """Sleeps 30 s on its first run (time to kill its worker), returns at once after."""
    runs = connection.get_client().hincrby(test_key("runs"), token, 1)
    if runs == 1:
        time.sleep(30)
    return runs


@task(takes_context=True)
async def async_where(context, token):
    """An async task: the thread it ran on (the worker's event loop is "event-loop"),
    and its attempt, read from the context."""
    import threading

    await asyncio.sleep(0.01)
    _count(token)
    return {"thread": threading.current_thread().name, "attempt": context.attempt}


@task
async def async_task_fails_once(token):
    """Fails on its first run, succeeds on the next (the default alias retries)."""
    runs = connection.get_client().hincrby(test_key("attempts"), token, 1)
    await asyncio.sleep(0)
    if runs == 1:
        raise RuntimeError("async task boom")
    return runs
