"""The durable outboxes made visible: api.Outbox, the admin dashboard, the metrics, and
the worker's warning about a row older than a minute (at the production threshold)."""

from __future__ import annotations

import logging
import re
import time

import pytest
from django.db import transaction
from testapp import jobs as tj

from cogworker_django import metrics
from cogworker_django.api import Outbox
from cogworker_django.api.snapshot import Snapshot
from cogworker_django.durable import chore
from cogworker_django.models import OutboxEntry
from cogworker_django.store import connection

from .. import durable_support
from ..admin_support import fast_passwords_fixture, url  # noqa: F401 - autouse fixture

pytestmark = pytest.mark.django_db(
    databases=["default", *durable_support.CONFIGURED], transaction=True
)
db_alias = durable_support.db_alias


@pytest.fixture
def waiting(db_alias, configure):
    """Two committed rows that Redis could not take (a closed port), backdated two
    minutes; then Redis is the test's again."""
    previous = configure()["REDIS_URL"]
    configure(REDIS_URL="redis://127.0.0.1:1/0")
    with transaction.atomic(using=db_alias):
        tj.record.using(durable=True, using_db=db_alias).enqueue_many([("a",), ("b",)])
    OutboxEntry.objects.using(db_alias).update(created_at=time.time() - 120)
    configure(REDIS_URL=previous)
    return db_alias


def test_the_api_counts_the_rows_and_ages_the_oldest(waiting):
    (info,) = [o for o in Outbox().databases() if o.database == waiting]
    assert info.size == 2
    assert 120 <= info.oldest_age < 200
    assert info.stale


def test_the_dashboard_shows_each_outbox(waiting, admin_client):
    html = admin_client.get(url("dashboard")).content.decode()
    assert f'id="outbox-size-{waiting}">2<' in html
    # The oldest row's age, read (backdated two minutes), and the row marked stale.
    assert re.search(rf'id="outbox-age-{waiting}">2 min \d+ s<', html), html
    assert f'<tr class="cw-warn"><td>{waiting}</td>' in html


def test_the_metrics_have_the_size_and_the_oldest_age(waiting):
    body, _ = metrics.render(Snapshot.read(), None, Outbox().databases())
    text = body.decode()
    assert f'cogworker_outbox_size{{database="{waiting}"}} 2.0' in text
    (line,) = [
        line
        for line in text.splitlines()
        if line.startswith(f'cogworker_outbox_oldest_age_seconds{{database="{waiting}"}}')
    ]
    assert float(line.split()[-1]) >= 120


def test_a_worker_warns_about_a_row_older_than_a_minute(db_alias, configure, caplog):
    configure(REDIS_URL="redis://127.0.0.1:1/0")  # the relay can't take it
    with transaction.atomic(using=db_alias):
        tj.record.using(durable=True, using_db=db_alias).enqueue("young")
    work = chore.Chore()
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        work.run_once(connection.get_client())
    assert "durable outbox of database" not in caplog.text  # seconds old: no warning
    OutboxEntry.objects.using(db_alias).update(created_at=time.time() - chore.STALE_AGE - 5)
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        work.run_once(connection.get_client())
        work.run_once(connection.get_client())  # once a minute, not every poll
    warned = [
        r.getMessage() for r in caplog.records if "durable outbox of database" in r.getMessage()
    ]
    assert len(warned) == 1
    assert f"database {db_alias!r}: 1 rows waiting, the oldest for 6" in warned[0]
