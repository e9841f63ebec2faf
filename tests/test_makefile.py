"""The Makefile's promises, read from `make -n` (nothing is run): `make runserver PORT=`
serves on that port; `make demo` installs the package alone, quietly (no test tools, one
summary line instead of pip's hundreds)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from .helpers import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def _dry_run(*args: str) -> list[str]:
    result = subprocess.run(
        ["make", "-n", "-B", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_runserver_takes_a_port():
    lines = _dry_run("runserver", "PORT=8123")
    assert any(line.endswith("runserver 127.0.0.1:8123") for line in lines)
    assert any(line.endswith("runserver 127.0.0.1:8000") for line in _dry_run("runserver"))


def test_demo_installs_only_the_package_quietly():
    lines = _dry_run("demo")
    installs = [line for line in lines if "pip install" in line]
    assert installs and all(" -q " in line for line in installs), installs
    assert not any("[test]" in line for line in installs), installs
    assert any("installed: cogworker_django" in line for line in lines)
    worker = [line for line in lines if line.rstrip().endswith("manage.py cogworker")]
    assert worker, lines


def test_the_postgresql_make_test_starts_is_said_to_stay_and_can_be_stopped():
    """`make test` leaves its throwaway PostgreSQL running: the README says so and how
    to stop it, and `make postgres-stop` stops it (scripts/ensure-postgres --stop)."""
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `make test` |"))
    assert "**leaves it running**" in row and "`make postgres-stop`" in row
    assert any(
        line.strip() == "scripts/ensure-postgres --stop" for line in _dry_run("postgres-stop")
    )
