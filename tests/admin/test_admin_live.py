"""The live dashboard: live.json (view permission, numbers and texts only), the per-job
statistics and trend charts on the page, escaped; the page without JavaScript shows the
same content."""

from __future__ import annotations

import json
import time

import pytest

from cogworker_django import history
from cogworker_django.api import history as api_history
from cogworker_django.store import keys, runtime

from ..admin_support import (  # noqa: F401 - fixtures
    fast_passwords_fixture,
    staff_client_fixture,
    url,
)
from ..api_support import make_job, push

pytestmark = pytest.mark.django_db

LIVE = "admin:cogworker_django_dashboard_live"


@pytest.fixture(autouse=True)
def clean():
    history.buffer.clear()
    runtime.current().of(api_history.DigestStates).clear()
    yield
    history.buffer.clear()
    runtime.current().of(api_history.DigestStates).clear()


def _runs(job: str, n: int, failed: int = 0) -> None:
    now = time.time()
    for i in range(n):
        exc = ValueError("no") if i < failed else None
        run = history.capture(
            {"jid": f"{i}", "func": job, "enqueued_at": now - 2}, "q", now, 0.05, exc
        )
        history.buffer.add(run)
    history.flush()


def live_url() -> str:
    return url("dashboard").rstrip("/") + "/live.json"


def test_live_json_needs_the_view_permission(staff_client, client):
    assert client.get(live_url()).status_code == 302  # anonymous: the login page
    assert staff_client().get(live_url()).status_code == 403
    response = staff_client("view_dashboard").get(live_url())
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]


def test_live_json_carries_the_numbers_tables_and_statistics(admin_client, r):
    for _ in range(3):
        push(r, make_job(queue="mail"))
    r.set(keys.stat("processed"), 12)
    _runs("app.jobs.send", 8, failed=2)
    api_history.digest()  # read once, as a previous page would have
    data = admin_client.get(live_url()).json()
    assert data["numbers"]["processed-total"] == 12
    assert data["numbers"]["enqueued"] == 3
    latency = data["queues"][0]["latency"]
    # No worker reads "mail" (not a typo of this test: the Dashboard says so, as Queues).
    assert data["queues"] == [
        {"name": "mail", "size": 3, "latency": latency, "state": "no worker reads this queue"}
    ]
    r.zadd(keys.live_queues(), {"mail": time.time()})  # a worker reads it now
    assert admin_client.get(live_url()).json()["queues"][0]["state"] == "active"
    (job,) = data["jobs"]
    assert (job["job"], job["runs"], job["failed"], job["failure_rate"]) == (
        "app.jobs.send",
        8,
        2,
        "25.0 %",
    )
    ids = [c["id"] for c in data["charts"]]
    assert ids == ["throughput-hour", "latency-hour", "throughput-day", "latency-day"]
    hour = data["charts"][0]["chart"]
    assert [line["name"] for line in hour["lines"]] == ["runs", "failed"]
    assert len(hour["lines"][0]["points"].split()) == 60


def test_the_page_shows_statistics_and_charts_escaped(admin_client):
    _runs("app.jobs.<script>alert(1)</script>", 3)
    api_history.digest()
    response = admin_client.get(url("dashboard"))
    body = response.content.decode().replace("<wbr>", "")  # names wrap after their dots
    assert response.status_code == 200
    assert "<script>alert(1)</script>" not in body
    assert "app.jobs.&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert 'id="cw-job-stats"' in body and 'id="chart-throughput-hour"' in body
    assert "cogworker_django/live.js" in body.split("</head>")[0]
    assert "<noscript>" in body


def test_the_first_reading_of_the_history_happens_in_the_background(admin_client):
    _runs("app.jobs.send", 2)
    body = admin_client.get(url("dashboard")).content.decode()
    assert 'id="cw-digest-pending"' in body
    from ..helpers import wait_until

    data = wait_until(
        lambda: (d := admin_client.get(live_url()).json())["jobs"] and d, 10, message="digest"
    )
    assert data["jobs"][0]["runs"] == 2


def test_redis_away_answers_503_json(admin_client, configure):
    configure(REDIS_URL="redis://127.0.0.1:1/0")
    response = admin_client.get(live_url())
    assert response.status_code == 503
    assert "error" in json.loads(response.content)


def test_the_statistics_table_says_what_its_emptiness_means(admin_client, configure):
    """Being read (first load of this process), empty, or not recorded at all: the
    counters above count runs either way, so "No runs recorded yet" is said only when
    it is true."""
    body = admin_client.get(url("dashboard")).content.decode()
    assert "Reading the run history…" in body and "No runs recorded yet." not in body
    assert 'data-pending="true"' in body
    api_history.digest()
    body = admin_client.get(url("dashboard")).content.decode()
    assert "No runs recorded yet." in body and 'data-pending="true"' not in body
    assert admin_client.get(live_url()).json()["no_runs"] == "No runs recorded yet."
    configure(HISTORY=False)
    data = admin_client.get(live_url()).json()
    assert data["jobs"] == [] and data["no_runs"].startswith("The run history is off")
    assert "The run history is off" in admin_client.get(url("dashboard")).content.decode()
