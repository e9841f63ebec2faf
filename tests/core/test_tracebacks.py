"""Stored tracebacks: the worker's own frames before the job's first frame are left out
(one line says how many), what the job called is kept, and a traceback with no frame of
the job is kept whole; the same collapsing applies to a stored text."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from testapp import jobs as tj

from cogworker_django.core import tracebacks

from ..helpers import ROOT, wait_until


def _run_as_library(fn):
    """Call ``fn`` from code compiled as if it were a module of this package (the
    frames a worker puts above a job), returning the exception it raised."""
    source = "def runner(fn):\n    try:\n        fn()\n    except Exception as exc:\n        return exc\n"
    namespace: dict = {}
    exec(
        compile(source, os.path.join(tracebacks._PACKAGE_DIR, "worker", "fake.py"), "exec"),
        namespace,
    )
    # The exception is caught in the library frame: its traceback starts there.
    return namespace["runner"](fn)


def _user_job():
    def helper():
        raise ValueError("in the job")

    helper()


def test_library_frames_above_the_job_are_left_out():
    exc = _run_as_library(_user_job)
    text = tracebacks.traceback_text(exc)
    lines = text.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1] == "  [1 frame of cogworker_django left out]"
    assert "in _user_job" in lines[2]  # the job's own frame comes first
    assert "in helper" in text and text.rstrip().endswith("ValueError: in the job")
    assert "fake.py" not in text


def test_a_traceback_without_a_job_frame_is_kept_whole():
    source = "def boom():\n    raise KeyError('library bug')\n"
    namespace: dict = {}
    exec(compile(source, os.path.join(tracebacks._PACKAGE_DIR, "jobs.py"), "exec"), namespace)
    exc = _run_as_library(namespace["boom"])
    text = tracebacks.traceback_text(exc)
    assert "left out" not in text and text.count('  File "') == 2


def test_chained_exceptions_are_collapsed_each():
    def chained():
        try:
            _user_job()
        except ValueError as inner:
            raise RuntimeError("wrapped") from inner

    text = tracebacks.traceback_text(_run_as_library(chained))
    assert text.count("left out]") == 1  # the outer one; the inner starts in the job
    assert "The above exception was the direct cause" in text


def test_a_stored_text_is_collapsed_the_same_way():
    stored = (
        "Traceback (most recent call last):\n"
        '  File "/srv/venv/lib/python3.12/site-packages/cogworker_django/worker/processor.py", line 200, in _execute\n'
        "    result = self._run(job)\n"
        "             ^^^^^^^^^^^^^^\n"
        '  File "/srv/venv/lib/python3.12/site-packages/cogworker_django/history.py", line 90, in __call__\n'
        "    return call()\n"
        '  File "/usr/lib/python3.12/contextlib.py", line 81, in inner\n'
        "    return func(*args, **kwds)\n"
        '  File "/srv/app/shop/jobs.py", line 12, in charge\n'
        "    gateway.charge(order)\n"
        '  File "/srv/venv/lib/python3.12/site-packages/django/db/models/query.py", line 3, in get\n'
        "    raise self.model.DoesNotExist\n"
        "shop.models.Order.DoesNotExist: gone\n"
    )
    shown = tracebacks.collapse_traceback(stored)
    lines = shown.splitlines()
    assert lines[1] == "  [3 frames of cogworker_django, contextlib left out]"
    assert lines[2].startswith('  File "/srv/app/shop/jobs.py"')
    assert "django/db/models/query.py" in shown  # below the job's frame: kept
    assert tracebacks.collapse_traceback(shown) == shown
    assert tracebacks.collapse_traceback("not a traceback\n") == "not a traceback\n"


def test_a_failed_job_run_by_a_worker_stores_its_own_frames_first(inworker, r, prefix):
    jid = tj.fails_once_dead.enqueue("shown first")
    w = inworker()
    (raw,) = wait_until(lambda: r.zrange(f"{prefix}:dead", 0, -1), 15, message="in dead")
    entry = json.loads(raw)
    assert entry["jid"] == jid
    lines = entry["traceback"].splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith("  [") and "cogworker_django" in lines[1], lines[:3]
    assert "testapp/jobs.py" in lines[2] and "in fails_once_dead" in lines[2]
    assert tracebacks._PACKAGE_DIR not in entry["traceback"]
    w.stop()


def test_these_tests_pass_in_a_checkout_named_after_the_package(tmp_path):
    """A clone named ``cogworker_django`` (the repository's own name), a vendored copy or a
    monorepo folder of that name: the job's frames are still the job's. The files git
    knows are copied into such a folder and this module's other tests run there, on the
    copy's own package."""
    checkout = tmp_path / "cogworker_django"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    ).stdout.split(b"\0")
    files = [f.decode() for f in listed if f] or [
        str(p.relative_to(ROOT))
        for d in ("cogworker_django", "tests", "testproject")
        for p in (ROOT / d).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ] + ["pyproject.toml"]
    for name in files:
        source = ROOT / name
        if source.is_file() and not name.startswith(("docs/", "bench/", "site/")):
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, checkout / name)
    here = Path(__file__).relative_to(ROOT)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            str(here),
            "-k",
            "not checkout_named",
        ],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "5 passed" in done.stdout, done.stdout[-1000:]
