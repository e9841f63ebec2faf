"""``cogworker.W102``: a database periodic entry that no worker would run is a warning
per entry (never an error that stops ``migrate``), only when the command checks
databases."""

from __future__ import annotations

import pytest
from django.core import checks as dj_checks
from django.core.management import call_command

from cogworker_django import checks
from cogworker_django.models import PeriodicEntry

pytestmark = pytest.mark.django_db


def test_a_row_naming_a_job_that_no_longer_exists_is_a_warning_per_entry(capsys):
    PeriodicEntry.objects.create(name="ok", cron="* * * * *", job="testapp.jobs.periodic_note")
    PeriodicEntry.objects.create(name="gone", cron="* * * * *", job="testapp.jobs.removed")
    PeriodicEntry.objects.create(name="bad-cron", cron="61 * * * *", job="testapp.jobs.noop")
    assert checks.check_periodic_database() == []  # no database asked for: not read
    found = checks.check_periodic_database(databases=["default"])
    assert [m.id for m in found] == ["cogworker.W102", "cogworker.W102"]
    assert all(m.level == dj_checks.WARNING for m in found)
    text = " ".join(m.msg for m in found)
    assert "'gone'" in text and "not a registered @job" in text
    assert "'bad-cron'" in text and "'ok'" not in text
    # `check` with the database says so, and does not fail.
    call_command("check", databases=["default"])
    assert "cogworker.W102" in capsys.readouterr().err
