"""The old import paths of the modules moved into folders (cogworker_django/_moved.py):
each gives the very module at its new path, so settings that name a class by dotted
path, results in Redis that name an exception's class, and applications' imports keep
working."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils.module_loading import import_string

import cogworker_django
from cogworker_django import _moved

PACKAGE = Path(cogworker_django.__file__).parent


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_an_old_path_is_the_module_at_its_new_path(old):
    new = importlib.import_module(f"cogworker_django.{_moved.MOVED[old]}")
    assert importlib.import_module(f"cogworker_django.{old}") is new
    # Its own name and spec: its relative imports resolve from where it lives now.
    assert new.__name__ == new.__spec__.name == f"cogworker_django.{_moved.MOVED[old]}"
    assert not (PACKAGE / f"{old}.py").exists()  # nothing at the old path shadows it


def test_dotted_paths_in_settings_and_stored_results_still_import():
    from cogworker_django.core.departures import JobLeft
    from cogworker_django.core.jobs import NotRegistered
    from cogworker_django.observe.logs import JobContextFilter, JSONFormatter

    assert import_string("cogworker_django.logs.JSONFormatter") is JSONFormatter
    assert import_string("cogworker_django.logs.JobContextFilter") is JobContextFilter
    assert import_string("cogworker_django.jobs.NotRegistered") is NotRegistered
    assert import_string("cogworker_django.departures.JobLeft") is JobLeft


def test_a_path_that_never_was_is_still_not_found():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("cogworker_django.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("cogworker_django.keys.no_such_module")


def test_an_old_path_imported_first_in_a_fresh_interpreter():
    # Before anything else of the package: the finder is installed by the package's
    # own import, which importing the old path triggers.
    code = (
        "import cogworker_django.keys as k, cogworker_django.store.keys as n, sys;"
        "assert k is n and sys.modules['cogworker_django.keys'] is n;"
        "from cogworker_django.client import BulkPushError;"
        "from cogworker_django import BulkPushError as B; assert B is BulkPushError;"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
