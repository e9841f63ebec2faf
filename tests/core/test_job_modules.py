"""Where workers find jobs: the jobs.py and tasks.py modules of installed apps are
imported at worker start, and `manage.py check` warns about a @job defined in a module
no worker imports (its payloads would go to dead as not registered)."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap

import pytest

from cogworker_django import checks
from cogworker_django.core import jobs
from cogworker_django.store import keys

from ..api_support import make_job, push
from ..helpers import run_command, wait_until

TASKS_MODULE = textwrap.dedent(
    """
    from cogworker_django import connection, job, keys


    @job
    def mark(token):
        connection.get_client().hset(f"{keys.prefix()}:test:runs", token, "tasks.py")
    """
)


@pytest.fixture
def tasks_app(tmp_path):
    """An installed app whose only job module is tasks.py (the Celery habit)."""
    app = tmp_path / "cwtasksapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text(TASKS_MODULE)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, "TESTPROJECT_EXTRA_APPS": "cwtasksapp"}


def test_a_job_in_an_apps_tasks_module_runs_on_a_worker(worker, r, prefix, tasks_app):
    push(r, make_job("cwtasksapp.tasks.mark", "from-tasks"))
    w = worker(env=tasks_app)
    wait_until(lambda: r.hget(f"{prefix}:test:runs", "from-tasks"), 15, message="job ran")
    assert r.zcard(keys.dead(keys.home_of("default"))) == 0
    assert w.stop() == 0


@pytest.fixture
def stray_module(tmp_path):
    (tmp_path / "cw_stray_views.py").write_text(TASKS_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("cw_stray_views")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("cw_stray_views", None)
        jobs._known().jobs.pop("cw_stray_views.mark", None)


def test_check_warns_about_a_job_no_worker_imports(stray_module):
    found = [m for m in checks.check_job_modules() if m.id == "cogworker.W003"]
    assert [m.obj for m in found] == ["cw_stray_views.mark"]
    assert "cw_stray_views, which a worker does not import" in found[0].msg
    assert "jobs.py or tasks.py" in found[0].hint


def test_jobs_of_job_modules_and_what_they_import_are_fine():
    import testapp.jobs  # noqa: F401 - registered through an installed app's jobs module

    assert jobs.registered("testapp.jobs.record") is not None
    assert checks.check_job_modules() == []


def test_a_tasks_module_that_fails_to_import_is_logged_not_fatal(tmp_path, settings, caplog):
    app = tmp_path / "cwbrokentasks"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text("import celery_is_not_installed_here\n")
    (app / "jobs.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "cwbrokentasks"]
        imported = jobs.import_job_modules()
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("cwbrokentasks", "cwbrokentasks.jobs", "cwbrokentasks.tasks"):
            sys.modules.pop(name, None)
    assert "cwbrokentasks.jobs" in imported and "cwbrokentasks.tasks" not in imported
    assert "cwbrokentasks.tasks could not be imported" in caplog.text


# COGWORKER["JOB_MODULES"]: more modules a worker imports ---------------------------------


@pytest.fixture
def extra_module(tmp_path):
    """A module outside any app, on the path of the test and of its workers."""
    (tmp_path / "cw_extra_jobs.py").write_text(TASKS_MODULE)
    sys.path.insert(0, str(tmp_path))
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    try:
        yield {"PYTHONPATH": path}
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("cw_extra_jobs", None)
        jobs._known().jobs.pop("cw_extra_jobs.mark", None)


def test_a_module_in_job_modules_runs_on_a_worker_which_lists_it_at_v2(
    worker, r, prefix, extra_module
):
    push(r, make_job("cw_extra_jobs.mark", "from-extra"))
    w = worker(env=extra_module, settings={"JOB_MODULES": ["cw_extra_jobs"]}, args=["-v", "2"])
    wait_until(lambda: r.hget(f"{prefix}:test:runs", "from-extra"), 15, message="job ran")
    w.wait_for_log(r"job modules: .*testapp\.jobs.*cw_extra_jobs")
    w.wait_for_log(r"registered jobs: .*cw_extra_jobs\.mark.*testapp\.jobs\.record")
    assert w.stop() == 0
    quiet = worker(env=extra_module)  # at the default verbosity: not listed
    assert quiet.stop() == 0 and "registered jobs" not in quiet.log()


def test_check_accepts_a_job_of_a_listed_module(extra_module, configure):
    importlib.import_module("cw_extra_jobs")
    assert [m.obj for m in checks.check_job_modules()] == ["cw_extra_jobs.mark"]
    configure(JOB_MODULES=["cw_extra_jobs"])
    assert checks.check_job_modules() == []


def test_the_w003_warning_names_the_setting(stray_module):
    (found,) = checks.check_job_modules()
    assert "COGWORKER['JOB_MODULES']" in found.msg and "JOB_MODULES" in found.hint


# A job module that fails to import: named, with its file; the cause under --traceback ---


@pytest.fixture
def broken_jobs_app(tmp_path):
    app = tmp_path / "cwbrokenjobs"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "jobs.py").write_text("from cogworker_django import job\nimport cw_no_such_module\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, "TESTPROJECT_EXTRA_APPS": "cwbrokenjobs"}, app / "jobs.py"


def test_a_jobs_module_that_fails_names_the_module_and_its_file(prefix, broken_jobs_app):
    env, path = broken_jobs_app
    done = run_command(prefix, "cogworker", env=env)
    assert done.returncode == 1
    assert (
        f"The job module cwbrokenjobs.jobs could not be imported ({path}, line 2): "
        "ModuleNotFoundError: No module named 'cw_no_such_module'"
    ) in done.stderr
    assert "Traceback" not in done.stderr
    traced = run_command(prefix, "cogworker", "--traceback", env=env)
    assert traced.returncode == 1
    assert "import cw_no_such_module" in traced.stderr  # the cause's own traceback
    checked = run_command(prefix, "check", env=env)
    assert "cogworker.E006" in checked.stderr and "cwbrokenjobs.jobs" in checked.stderr


def test_a_listed_module_that_is_missing_is_named(prefix):
    done = run_command(prefix, "cogworker", settings={"JOB_MODULES": ["cw_not_there.jobs"]})
    assert done.returncode == 1
    assert (
        "The job module cw_not_there.jobs (COGWORKER['JOB_MODULES']) could not be imported "
        "(not found): ModuleNotFoundError"
    ) in done.stderr
