"""Every admin action through Django's test client: POST only, CSRF checked, the effect
in Redis, the message shown, and confirmation pages for destructive bulk actions."""

import json
import time

import pytest
from django.utils.html import escape

from cogworker_django.api import DeadSet, RetrySet, ScheduledSet
from cogworker_django.api import quarantine as quarantine_api
from cogworker_django.store import keys

from ..admin_support import fast_passwords_fixture, messages_of, post, url  # noqa: F401 - autouse fixture
from ..api_support import add_to, make_job, push, unique_job

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.cluster,
    pytest.mark.spread,
]  # cluster: tests/cluster_support.py


def test_actions_are_post_only_and_csrf_checked(admin_client, admin_user, r):
    from django.test import Client

    add_to(r, "dead", make_job())
    assert admin_client.get(url("deadjob", "action")).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    key = DeadSet().page()[0].key
    assert post(strict, "deadjob", "delete", key=key).status_code == 403
    assert DeadSet().size() == 1
    # With the token from the page the same POST goes through.
    page = strict.get(url("deadjob"))
    token = page.context["csrf_token"]
    response = strict.post(
        url("deadjob", "action"),
        {"action": "delete", "key": key, "csrfmiddlewaretoken": str(token)},
    )
    assert response.status_code == 302 and DeadSet().size() == 0


def test_unknown_action_is_400(admin_client):
    assert post(admin_client, "deadjob", "explode").status_code == 400
    assert post(admin_client, "queue", "retry").status_code == 400


def test_retry_selected_dead_jobs(admin_client, r):
    jobs = [make_job(token=i, queue="low") for i in range(3)]
    for j in jobs:
        add_to(r, "dead", j)
    r.zadd(keys.dead(keys.home_of("default")), {b"not json": time.time()})
    keys_ = [rec.key for rec in DeadSet().page()]
    response = post(admin_client, "deadjob", "retry", key=keys_, next=url("deadjob") + "?p=1")
    assert response.status_code == 302 and response["Location"] == url("deadjob") + "?p=1"
    assert r.llen(keys.queue("low")) == 3 and DeadSet().size() == 1
    text = messages_of(admin_client.get(url("deadjob")))[0]
    assert "3 jobs sent to their queues" in text and "1 job can't go to a queue" in text
    # Posting the same keys again: they are gone, nothing is pushed twice.
    post(admin_client, "deadjob", "retry", key=keys_)
    assert r.llen(keys.queue("low")) == 3
    assert "3 jobs had already gone" in messages_of(admin_client.get(url("deadjob")))[0]


def test_no_selection_warns(admin_client):
    post(admin_client, "deadjob", "delete")
    assert messages_of(admin_client.get(url("deadjob"))) == ["No job selected."]


def test_enqueue_scheduled_now_and_delete(admin_client, r):
    add_to(r, "schedule", make_job(token="a"), time.time() + 600)
    locked = unique_job(r)
    add_to(r, "schedule", locked, time.time() + 700)
    first, second = ScheduledSet().page()
    post(admin_client, "scheduledjob", "retry", key=first.key)
    assert json.loads(r.lindex(keys.queue("default"), 0))["token"] == "a"
    post(admin_client, "scheduledjob", "delete", key=second.key)
    assert ScheduledSet().size() == 0
    assert not r.exists(keys.unique(locked["unique_digest"], keys.home_of("default")))


def test_kill_a_retry(admin_client, r):
    add_to(r, "retry", make_job(error_message="boom"))
    post(admin_client, "retryjob", "kill", key=RetrySet().page()[0].key)
    assert RetrySet().size() == 0 and DeadSet().size() == 1
    assert "1 job moved to dead." in messages_of(admin_client.get(url("retryjob")))


def test_detail_page_buttons_post_actions(admin_client, r):
    add_to(r, "retry", make_job())
    rec = RetrySet().page()[0]
    html = admin_client.get(url("retryjob", "job"), {"key": rec.key}).content.decode()
    assert 'data-action="retry"' in html and 'data-action="kill"' in html
    assert 'data-action="delete"' in html


@pytest.mark.parametrize(
    ("action", "question"),
    [
        ("retry_all", "Send all 3 dead jobs back to their queues?"),
        ("delete_all", "Delete all 3 dead jobs? This can't be undone."),
    ],
)
def test_dead_bulk_actions_ask_for_confirmation(admin_client, r, action, question):
    for i in range(3):
        add_to(r, "dead", make_job(token=i))
    response = post(admin_client, "deadjob", action, scope="all")
    html = response.content.decode()
    assert response.status_code == 200 and escape(question) in html
    assert 'name="confirmed" value="yes"' in html
    assert DeadSet().size() == 3  # nothing happened yet
    response = post(admin_client, "deadjob", action, scope="all", confirmed="yes")
    assert response.status_code == 302
    assert DeadSet().size() == 0
    assert r.llen(keys.queue("default")) == (3 if action == "retry_all" else 0)


def test_pause_resume_and_clear_queue(admin_client, r):
    locked = unique_job(r)
    push(r, locked)
    push(r, make_job())
    post(admin_client, "queue", "pause", name="default")
    assert r.sismember(keys.paused(keys.home_of("default")), "default")
    html = admin_client.get(url("queue")).content.decode()
    assert "paused</span>" in html and 'data-action="resume"' in html
    post(admin_client, "queue", "resume", name="default")
    assert not r.sismember(keys.paused(keys.home_of("default")), "default")

    response = post(admin_client, "queue", "clear", name="default")
    assert response.status_code == 200
    assert (
        "Clear queue &#x27;default&#x27;? Its 2 jobs will be deleted" in response.content.decode()
    )
    assert r.llen(keys.queue("default")) == 2
    post(admin_client, "queue", "clear", name="default", confirmed="yes")
    assert r.llen(keys.queue("default")) == 0
    assert not r.exists(keys.unique(locked["unique_digest"], keys.home_of("default")))
    assert "2 jobs deleted" in messages_of(admin_client.get(url("queue")))[0]


def test_quiet_and_stop_reach_a_subscriber(admin_client, r):
    ident = "proc-x"
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.signal(ident))
    try:
        post(admin_client, "process", "quiet", identity=ident)
        post(admin_client, "process", "stop", identity=ident)
        got = []
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            m = pubsub.get_message(timeout=0.5)
            if m:
                got.append(m["data"])
        assert got == ["quiet", "stop"]
    finally:
        pubsub.close()
    # Nobody listening: the operator is told the process is gone.
    post(admin_client, "process", "quiet", identity="nobody")
    assert "it is gone" in messages_of(admin_client.get(url("process")))[-1]


def test_quarantine_delete(admin_client, r):
    from cogworker_django.worker import keyguard

    r.set(keys.retry(keys.home_of("default")), "wrong type")
    keyguard.check()
    copy = quarantine_api.quarantined()[0]["key"]
    post(admin_client, "quarantinedkey", "delete", key=copy)
    assert not r.exists(copy)
    assert "deleted" in messages_of(admin_client.get(url("quarantinedkey")))[0]
    # Never any other key.
    r.sadd(keys.queues(), "default")
    post(admin_client, "quarantinedkey", "delete", key=keys.queues())
    assert r.exists(keys.queues())
    assert "not a quarantined copy" in messages_of(admin_client.get(url("quarantinedkey")))[0]


def test_redis_down_during_an_action_shows_503(admin_client, configure):
    from ..helpers import free_port

    configure(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    response = post(admin_client, "queue", "pause", name="default")
    assert response.status_code == 503


def test_unsafe_next_is_ignored(admin_client, r):
    response = post(admin_client, "queue", "pause", name="q", next="https://evil.example/")
    assert response["Location"] == url("queue")


def test_periodic_disable_enable_run_now(admin_client, settings, r):
    settings.COGWORKER_PERIODIC = {
        "nightly": {
            "cron": "0 3 * * *",
            "job": "testapp.jobs.record",
            "queue": "low",
            "unique": "until_executed",
        },
    }
    post(admin_client, "periodicentry", "disable", name="nightly")
    assert r.sismember(keys.periodic_disabled(), "nightly")
    html = admin_client.get(url("periodicentry")).content.decode()
    assert "disabled</span>" in html and 'data-action="enable"' in html
    post(admin_client, "periodicentry", "enable", name="nightly")
    assert not r.sismember(keys.periodic_disabled(), "nightly")
    post(admin_client, "periodicentry", "run_now", name="nightly")
    assert r.llen(keys.queue("low")) == 1
    assert "enqueued now as job" in messages_of(admin_client.get(url("periodicentry")))[-1]
    post(admin_client, "periodicentry", "run_now", name="nightly")
    assert r.llen(keys.queue("low")) == 1
    assert "holds its lock" in messages_of(admin_client.get(url("periodicentry")))[-1]
    post(admin_client, "periodicentry", "disable", name="nope")
    assert "no periodic entry named" in messages_of(admin_client.get(url("periodicentry")))[-1]
