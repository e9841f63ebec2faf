"""Where workers find jobs: the jobs.py and tasks.py modules of installed apps are
imported at worker start, and `manage.py check` warns about a @job defined in a module
no worker imports (its payloads would go to dead as not registered). (Workers started on
such modules, and the command's error for one that fails to import:
tests/worker/test_worker_command.py.)"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap

import pytest

from cogworker_django import checks
from cogworker_django.core import jobs

TASKS_MODULE = textwrap.dedent(
    """
    from cogworker_django import connection, job, keys


    @job
    def mark(token):
        connection.get_client().hset(f"{keys.prefix()}:test:runs", token, "tasks.py")
    """
)


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


# Imported by tests/worker/test_worker_command.py too (its worker runs a job of the module):
# the fixture's name differs from the function's so that an argument named like the
# fixture doesn't shadow the import.
@pytest.fixture(name="extra_module")
def extra_module_fixture(tmp_path):
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


def test_check_accepts_a_job_of_a_listed_module(extra_module, configure):
    importlib.import_module("cw_extra_jobs")
    assert [m.obj for m in checks.check_job_modules()] == ["cw_extra_jobs.mark"]
    configure(JOB_MODULES=["cw_extra_jobs"])
    assert checks.check_job_modules() == []


def test_the_w003_warning_names_the_setting(stray_module):
    (found,) = checks.check_job_modules()
    assert "COGWORKER['JOB_MODULES']" in found.msg and "JOB_MODULES" in found.hint
