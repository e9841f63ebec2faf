"""The databases the durable-enqueue tests run on (tests/durable/test_durable_*.py).

Each test takes ``db_alias``: "durable_sqlite" (a SQLite file) and "durable_pg"
(PostgreSQL, when COGWORKER_TEST_POSTGRES_URL names one: ``make test`` and CI start it
with scripts/ensure-postgres). Without a PostgreSQL the "durable_pg" runs are skipped,
except under CI (``CI=true``), where they fail: CI must test PostgreSQL.

pytest-django creates the test databases of both (``DATABASES``), flushed after each
test; a worker subprocess reaches the same ones through :func:`worker_env`.
"""

from __future__ import annotations

import json
import os

import pytest
from django.conf import settings
from django.db import connections

ALIASES = ["durable_sqlite", "durable_pg"]
CONFIGURED = [alias for alias in ALIASES if alias in settings.DATABASES]

# Every durable test: a transactional test on both databases (a worker subprocess sees
# only committed rows).
durable_db = pytest.mark.django_db(databases=CONFIGURED, transaction=True)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(params=ALIASES)
def db_alias(request) -> str:
    from cogworker_django.durable import relay

    relay.known().tables.clear()  # which databases have the table: as this test sees them
    alias = request.param
    if alias not in settings.DATABASES:
        message = (
            f"no PostgreSQL for the {alias} runs: set COGWORKER_TEST_POSTGRES_URL "
            "(scripts/ensure-postgres starts one; docs/contributing.md)"
        )
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return alias


def worker_env(alias: str | None = None) -> dict[str, str]:
    """The environment that points a subprocess of the test project at this test
    process's test databases (their names are set up by pytest-django)."""
    env = {"TESTPROJECT_DURABLE_SQLITE": str(connections["durable_sqlite"].settings_dict["NAME"])}
    if "durable_pg" in settings.DATABASES:
        env["TESTPROJECT_DURABLE_PG_NAME"] = str(connections["durable_pg"].settings_dict["NAME"])
    return env


def skip_locked(alias: str) -> bool:
    return bool(connections[alias].features.has_select_for_update_skip_locked)


def row_payload(jid: str, *args: object) -> str:
    """The payload text of a row written by hand (``testapp.jobs.record`` on "default"),
    as an enqueue would write it."""
    return json.dumps(
        {
            "jid": jid,
            "func": "testapp.jobs.record",
            "args": list(args),
            "kwargs": {},
            "queue": "default",
            "retry": True,
            "retry_count": 0,
            "created_at": 1.0,
            "enqueued_at": 1.0,
        }
    )
