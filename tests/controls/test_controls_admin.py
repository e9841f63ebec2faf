"""The job controls in the admin: the Limits page (each limiter, its use, the lease
holders) and Cancel on Busy, Scheduled and Retries (change permission, POST + CSRF)."""

from __future__ import annotations

import json
import time

import pytest
from testapp import jobs as tj

from cogworker_django import api
from cogworker_django.api import RetrySet, ScheduledSet
from cogworker_django.controls import limits
from cogworker_django.core import payload
from cogworker_django.store import keys

from ..admin_support import (  # noqa: F401 - fixtures
    fast_passwords_fixture,
    messages_of,
    post,
    staff_client_fixture,
    url,
)
from ..helpers import wait_until

pytestmark = pytest.mark.django_db

LIMITS = {"test-pair": {"concurrency": 2}, "test-rate": {"rate": 3, "per": 2}}


def test_limits_page_shows_each_limiter_and_its_holders(admin_client, configure):
    configure(LIMITS=LIMITS)
    lease = limits.take(["test-pair"], {"jid": "feedc0de", "func": "app.jobs.charge"})
    try:
        page = admin_client.get(url("limiter"))
    finally:
        limits.release(lease)
    assert page.status_code == 200
    html = page.content.decode()
    assert "test-pair" in html and "at most 2 at once" in html and "1 / 2" in html
    assert "feedc0de" in html and "app.jobs.charge" in html
    assert "at most 3 starts per 2 s" in html


def test_limits_page_counts_the_jobs_waiting_for_a_limiter(admin_client, configure, r):
    configure(LIMITS=LIMITS)
    r.zadd(keys.limit_waiting("test-pair"), {'{"jid": "a"}': 1, '{"jid": "b"}': 2})
    assert api.Limits().get("test-pair").waiting == 2
    assert api.Limits().get("test-rate").waiting == 0
    html = admin_client.get(url("limiter")).content.decode()
    assert '<td class="waiting">2</td>' in html


def test_a_lease_of_an_abandoned_run_stays_held_and_is_shown_as_such(admin_client, configure, r):
    """The watchdog abandons a run whose body is still inside: its lease stays counted,
    refreshed by the heartbeat under its new name, shown as an abandoned run's, and is
    released when the body returns."""
    configure(LIMITS=LIMITS)
    job = {"jid": "feedc0de", "func": "app.jobs.charge"}
    lease = limits.take(["test-pair"], job)
    try:
        limits.keep_for_abandoned_run(id(job))
        [holder] = api.Limits().get("test-pair").holders
        assert holder.abandoned and holder.jid == "feedc0de"
        assert api.Limits().get("test-pair").in_use == 1
        html = admin_client.get(url("limiter")).content.decode()
        assert "held by an abandoned run" in html
        # Still this process's lease: the heartbeat refreshes it (and puts it back).
        leases = keys.limit_leases("test-pair")
        r.zrem(leases, lease.member)
        limits.LeaseRefresher()(r, False)
        assert r.zscore(leases, lease.member) is not None
    finally:
        limits.release(lease)
    assert api.Limits().get("test-pair").in_use == 0
    assert "held by an abandoned run" not in admin_client.get(url("limiter")).content.decode()


def test_limits_page_without_limiters(admin_client, configure):
    configure(LIMITS={})
    assert "No limiter is configured" in admin_client.get(url("limiter")).content.decode()


def test_cancel_scheduled_and_retrying_jobs(admin_client, r):
    tj.record.enqueue_in(300, "later")
    job = tj.record._build(("again",), {})
    job["retry_count"] = 1
    r.zadd(keys.retry(keys.home_of("default")), {payload.encode(job): time.time() + 300})
    key = ScheduledSet().page()[0].key
    assert post(admin_client, "scheduledjob", "cancel", key=key).status_code == 302
    assert ScheduledSet().size() == 0
    assert "1 job cancelled" in messages_of(admin_client.get(url("scheduledjob")))[0]
    key = RetrySet().page()[0].key
    post(admin_client, "retryjob", "cancel", key=key)
    assert RetrySet().size() == 0
    post(admin_client, "retryjob", "cancel", key=key)
    shown = " ".join(messages_of(admin_client.get(url("retryjob"))))
    assert "1 job cancelled" in shown and "1 job had already gone" in shown


def test_cancel_needs_change_permission(staff_client, r):
    tj.record.enqueue_in(300, "later")
    viewer = staff_client("view_scheduledjob", "view_busyjob")
    key = ScheduledSet().page()[0].key
    assert post(viewer, "scheduledjob", "cancel", key=key).status_code == 403
    assert post(viewer, "busyjob", "cancel", jid="0" * 24).status_code == 403
    assert ScheduledSet().size() == 1
    page = viewer.get(url("scheduledjob")).content.decode()
    assert "Cancel (remove" not in page
    changer = staff_client("view_scheduledjob", "change_scheduledjob")
    assert "Cancel (remove" in changer.get(url("scheduledjob")).content.decode()


def test_cancel_on_busy_is_csrf_checked_and_says_when_the_job_finished(staff_client, admin_client):
    strict = staff_client("view_busyjob", "change_busyjob", csrf=True)
    assert post(strict, "busyjob", "cancel", jid="0" * 24).status_code == 403
    response = post(admin_client, "busyjob", "cancel", jid="0" * 24)
    assert response.status_code == 302
    [text] = messages_of(admin_client.get(url("busyjob")))
    assert "no longer running" in text and "finished meanwhile" in text


def test_cancel_a_running_job_from_busy(admin_client, inworker, r, prefix):
    jid = tj.cooperative_cancel.enqueue("busy")
    w = inworker(concurrency=1)
    wait_until(
        lambda: any(json.loads(v).get("payload", "").find(jid) >= 0 for v in _work(r, prefix)),
        15,
        message="the job in the Busy snapshot",
    )
    page = admin_client.get(url("busyjob")).content.decode()
    assert 'data-action="cancel"' in page
    post(admin_client, "busyjob", "cancel", jid=jid)
    said = messages_of(admin_client.get(url("busyjob")))[0]
    assert "cancelled: cancelled() is True" in said
    # What happens to a job inside a C call, which the interruption reaches only later.
    assert "a job inside a C call (a sleep, a socket read, a database query) only when" in said
    assert "its thread is abandoned and the job dropped as cancelled" in said
    wait_until(lambda: r.hget(f"{prefix}:test:runs", "busy-saw-cancel"), 15, message="seen")
    w.stop()


def _work(r, prefix) -> list[str]:
    out = []
    for key in r.keys(f"{prefix}:work:*"):
        out += r.hvals(key)
    return out
