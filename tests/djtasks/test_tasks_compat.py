"""The django.tasks backend on any Django: 6.0+ has it; on 5.2 (no django.tasks) every
module still imports, the worker's hooks and middleware do nothing, and asking for the
backend says why it is missing."""

import os
import subprocess
import sys
from pathlib import Path

import django
import pytest

from cogworker_django import djtasks, tasks_backend
from cogworker_django.djtasks import middleware, worker_setup
from cogworker_django.worker import plugins

HAS_TASKS = django.VERSION >= (6, 0)


def test_the_backend_is_there_exactly_from_django_6():
    assert djtasks.available() is HAS_TASKS
    if HAS_TASKS:
        from django.tasks.backends.base import BaseTaskBackend

        assert issubclass(tasks_backend.CogworkerBackend, BaseTaskBackend)
    else:
        with pytest.raises(ImportError, match=r"needs Django 6\.0\+ \(django\.tasks\)"):
            from cogworker_django.tasks_backend import CogworkerBackend  # noqa: F401


def test_every_worker_loads_the_middleware_and_it_passes_jobs_through():
    chain = plugins.middleware_of(plugins.builtin())()
    assert any(isinstance(m, middleware.TaskResultMiddleware) for m in chain)
    job = {"jid": "j", "func": "testapp.jobs.noop", "args": [], "kwargs": {}}
    assert middleware.TaskResultMiddleware()(job, "default", lambda: "ran") == "ran"


def test_worker_hooks_only_act_where_tasks_exist():
    worker_setup.validate()  # never raises with the test project's settings
    assert bool(worker_setup.our_aliases()) is HAS_TASKS


def test_the_store_hooks_and_middleware_import_without_django_tasks():
    """As on Django 5.2: with ``django.tasks`` missing, the modules every worker imports
    still import (a fresh interpreter, where importing django.tasks fails)."""
    code = (
        "import sys; sys.modules['django.tasks'] = None\n"
        "import cogworker_django.djtasks.store, cogworker_django.djtasks.worker_setup\n"
        "import cogworker_django.djtasks.middleware, cogworker_django.worker.processor\n"
        "print('imported')"
    )
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "PYTHONPATH": os.pathsep.join([str(root / "testproject"), str(root)]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "imported", done.stderr[-3000:]
