"""``using_db`` names a database of DATABASES: a wrong one is refused where it is written
(``using()``, ``@job``), so `manage.py check` reports a decorator's at once instead of
the first durable enqueue."""

from __future__ import annotations

import textwrap

import pytest
from testapp import jobs as tj

from ..helpers import run_command


def test_using_refuses_a_database_that_is_not_configured():
    with pytest.raises(ValueError, match=r"using_db must name a database of DATABASES \(default"):
        tj.record.using(using_db="nope")
    with pytest.raises(ValueError, match=r"got 'nope'"):
        tj.record.using(durable=True, using_db="nope")
    assert tj.record.using(using_db="durable_sqlite")  # a configured one is fine


def test_check_reports_a_decorators_unknown_database(prefix, tmp_path):
    (tmp_path / "cw_baddb.py").write_text(
        textwrap.dedent(
            """
            from cogworker_django import job


            @job(durable=True, using_db="nope")
            def charge(order_id):
                pass
            """
        )
    )
    done = run_command(
        prefix,
        "check",
        settings={"JOB_MODULES": ["cw_baddb"]},
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode != 0
    assert "cw_baddb" in done.stderr
    assert "using_db must name a database of DATABASES" in done.stderr and "'nope'" in done.stderr
