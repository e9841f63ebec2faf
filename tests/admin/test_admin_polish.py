"""The admin pages say what they show: the Scheduled page has no failure columns, the
Batches footer counts batches, the Periodic footnote explains what the table shows, job
names wrap after their dots only; and the demo project carries none of the tests'
limiters (its Limits page would show them)."""

from __future__ import annotations

import json
import re
import time

import pytest

from cogworker_django import Batch
from cogworker_django.store import keys

from ..admin_support import fast_passwords_fixture, url  # noqa: F401 - autouse fixture
from ..api_support import add_to, make_job
from ..helpers import run_command

pytestmark = pytest.mark.django_db


def _headers(html: str) -> list[str]:
    head = html.split('<table id="result_list">', 1)[1].split("</thead>", 1)[0]
    return [re.sub(r"<[^>]+>", "", h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", head)]


def test_only_retries_and_dead_show_the_error_and_failures_columns(admin_client, r):
    now = time.time()
    failed = {"error_class": "ValueError", "error_message": "no", "retry_count": 2}
    add_to(r, "schedule", make_job("app.jobs.later", 1), now + 600)
    add_to(r, "retry", make_job("app.jobs.again", 2, **failed), now + 60)
    add_to(r, "dead", make_job("app.jobs.gone", 3, **failed), now - 60)
    scheduled = admin_client.get(url("scheduledjob")).content.decode()
    assert "Error" not in _headers(scheduled) and "Failures" not in _headers(scheduled)
    assert "Run at" in _headers(scheduled) and "Enqueued" in _headers(scheduled)
    row = scheduled.split('data-jid="', 1)[1].split("</tr>", 1)[0]
    assert row.count("<td") == len(_headers(scheduled))  # each cell under its header
    for model in ("retryjob", "deadjob"):
        html = admin_client.get(url(model)).content.decode()
        assert {"Error", "Failures"} <= set(_headers(html)), model
        assert "ValueError: no" in html


def test_the_batches_footer_counts_batches(admin_client):
    from testapp import jobs as tj

    with Batch(description="one"):
        tj.wf_member.enqueue_many(["a", "b", "c"])
    html = admin_client.get(url("batch")).content.decode()
    assert '<span class="cw-count">1 batch</span>' in html
    with Batch(description="two"):
        tj.wf_member.enqueue("d")
    html = admin_client.get(url("batch")).content.decode()
    assert '<span class="cw-count">2 batches</span>' in html
    assert "jobs</span>" not in html


def test_the_periodic_footnote_explains_what_the_table_shows(admin_client, r, settings):
    settings.COGWORKER_PERIODIC = {
        "exclusive": {
            "cron": "*/5 * * * *",
            "job": "testapp.jobs.periodic_span",
            "unique": "until_executed",
        }
    }
    r.set(keys.periodic_running("exclusive"), "somejid")
    html = admin_client.get(url("periodicentry")).content.decode()
    headers = _headers(html)
    note = html.split('<p class="help">', 1)[1].split("</p>", 1)[0]
    # The footnote starts with the column it explains, one the table has.
    assert note.split(":", 1)[0] in headers, (note, headers)
    state = html.split('data-entry="exclusive"', 1)[1].split('class="state">', 1)[1]
    assert "locked by <code>somejid</code>" in state.split("</td>", 1)[0]
    assert '"locked by"' in note


def test_job_names_wrap_after_their_dots_only(admin_client, r):
    add_to(r, "dead", make_job("demo.jobs.<b>flaky</b>", 1, error_class="E"), time.time())
    html = admin_client.get(url("deadjob")).content.decode()
    assert 'class="cw-job">demo.<wbr>jobs.<wbr>&lt;b&gt;flaky&lt;/b&gt;</a>' in html
    assert "<b>flaky" not in html


def test_the_demo_settings_carry_no_test_limiters(prefix):
    """The demo (testproject/settings.py) shows its own limiters only; the tests'
    (test-pair, test-rate) and the app whose jobs name them are in test_settings.py."""
    show = (
        "import json; from django.conf import settings; "
        "print(json.dumps([settings.COGWORKER.get('LIMITS') or {}, settings.INSTALLED_APPS]))"
    )
    demo = run_command(
        prefix, "shell", "-c", show, env={"DJANGO_SETTINGS_MODULE": "testproject.settings"}
    )
    assert demo.returncode == 0, demo.stderr
    limits, apps = json.loads(demo.stdout.strip().splitlines()[-1])
    assert not [name for name in limits if name.startswith("test-")], limits
    assert "testapp" not in apps and "demo" in apps
    # The demo project still passes its checks (its job modules import).
    check = run_command(prefix, "check", env={"DJANGO_SETTINGS_MODULE": "testproject.settings"})
    assert check.returncode == 0, check.stdout + check.stderr
    tests = run_command(prefix, "shell", "-c", show)  # DJANGO_SETTINGS_MODULE of the suite
    limits, apps = json.loads(tests.stdout.strip().splitlines()[-1])
    assert set(limits) == {"test-pair", "test-rate"} and "testapp" in apps
