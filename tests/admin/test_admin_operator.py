"""Admin pages for what an operator looks for: jobs of dead processes awaiting recovery,
bounded rendering of big payloads with a download of the raw JSON, deleting one queued
job, finding a job by jid everywhere, a queue key of the wrong type, Redis without
persistence, and the wording of counts and messages."""

from __future__ import annotations

import json
import time

import pytest

from cogworker_django.api import DeadSet, Queue
from cogworker_django.store import keys

from ..admin_support import (  # noqa: F401 - autouse fixture
    fast_passwords_fixture,
    messages_of,
    post,
    staff_client_fixture,
    url,
)
from ..api_support import add_to, make_job, push

pytestmark = pytest.mark.django_db

XSS = "<script>alert(1)</script>"


def _redis_now(r) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


# Awaiting recovery ------------------------------------------------------------------------


def test_processes_page_lists_jobs_awaiting_recovery(admin_client, configure, r):
    configure(ORPHAN_THRESHOLD=300)
    ident = f"host{XSS}:4242:beef"
    r.sadd(keys.inprogress_ids(), ident)
    r.hset(keys.last_beat(), ident, int(_redis_now(r)) - 20)
    job = make_job("shop.jobs.charge", 7, XSS, queue="billing")
    r.lpush(keys.inprogress(ident, keys.home_of("default")), json.dumps(job))
    html = (
        admin_client.get(url("process")).content.decode().replace("<wbr>", "")
    )  # names wrap at dots
    section = html.split('id="awaiting-recovery"')[1]
    assert "shop.jobs.charge" in section and job["jid"] in section and "billing" in section
    assert "not before" in section and "4 min" in section  # 300 - 20 s, on Redis's clock
    assert "no worker is running" in section
    assert XSS not in html and "&lt;script&gt;" in section
    dashboard = admin_client.get(url("dashboard")).content.decode()
    assert 'id="awaiting-recovery">1<' in dashboard


def test_processes_page_shows_a_dead_processs_periodic_claims_not_pushed(admin_client, r):
    ident = f"host{XSS}:4343:cafe"
    r.sadd(keys.periodic_claimers(), ident)
    r.hset(keys.periodic_claims(ident), f"1800000000:nightly{XSS}", "c j1 {}")
    html = admin_client.get(url("process")).content.decode()
    section = html.split('id="awaiting-recovery"')[1]
    assert "0 jobs, " in section and "1 periodic slot claimed but not pushed" in section
    assert XSS not in html
    dashboard = admin_client.get(url("dashboard")).content.decode()
    assert 'id="awaiting-recovery">1<' in dashboard


def test_processes_page_says_when_nothing_awaits_recovery(admin_client):
    html = admin_client.get(url("process")).content.decode()
    assert 'id="cw-no-orphans"' in html


# Big payloads -----------------------------------------------------------------------------


def test_a_big_payload_is_cut_on_every_page_and_downloadable_whole(admin_client, configure, r):
    configure(MAX_PAYLOAD_BYTES=10_000_000)  # written by a producer with a higher limit
    big = "x" * 3_000_000 + XSS
    job = make_job("shop.jobs.import_rows", big, error_class="ValueError", error_message="bad")
    job["traceback"] = (
        'Traceback (most recent call last):\n  File "/srv/shop/jobs.py", line 1, in f\nValueError: bad\n'
    )
    raw = add_to(r, "dead", job)
    push(r, make_job("shop.jobs.import_rows", big, queue="bulk"))
    started = time.monotonic()
    listing = admin_client.get(url("deadjob")).content.decode()
    assert len(listing) < 100_000
    key = DeadSet().page()[0].key
    detail = admin_client.get(url("deadjob", "job"), {"key": key}).content.decode()
    queue_page = admin_client.get(url("queue", "jobs"), {"name": "bulk"}).content.decode()
    assert time.monotonic() - started < 5
    assert len(detail) < 100_000 and len(queue_page) < 100_000
    assert 'id="cw-args-cut"' in detail and "Download the raw JSON" in detail
    assert detail.count("Traceback (most recent call last)") == 1  # not repeated in Payload
    assert "&quot;traceback&quot;: &quot;(shown above)&quot;" in detail
    assert XSS not in detail
    download = admin_client.get(url("deadjob", "job_raw"), {"key": key})
    assert download.status_code == 200
    assert download["Content-Type"].startswith("application/json")
    assert download["Content-Disposition"].startswith("attachment;")
    assert download.content == raw.encode()


def test_the_raw_download_needs_the_view_permission(staff_client, r):
    add_to(r, "dead", make_job())
    key = DeadSet().page()[0].key
    assert (
        staff_client("view_retryjob").get(url("deadjob", "job_raw"), {"key": key}).status_code
        == 403
    )
    allowed = staff_client("view_deadjob").get(url("deadjob", "job_raw"), {"key": key})
    assert allowed.status_code == 200
    assert (
        staff_client("view_deadjob").get(url("deadjob", "job_raw"), {"key": "1|x"}).status_code
        == 404
    )


def test_a_stored_traceback_shows_the_jobs_frames_first(admin_client, r):
    job = make_job("shop.jobs.charge", error_class="KeyError", error_message="'sku'")
    job["traceback"] = (
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.12/site-packages/cogworker_django/worker/processor.py", line 9, in run\n'
        "    perform(job)\n"
        '  File "/venv/lib/python3.12/site-packages/cogworker_django/jobs.py", line 3, in perform\n'
        "    fn()\n"
        '  File "/srv/shop/jobs.py", line 12, in charge\n'
        "    stock['sku']\n"
        "KeyError: 'sku'\n"
    )
    add_to(r, "dead", job)
    key = DeadSet().page()[0].key
    html = admin_client.get(url("deadjob", "job"), {"key": key}).content.decode()
    shown = html.split('id="cw-traceback">')[1].split("</pre>")[0]
    lines = shown.splitlines()
    assert lines[1] == "  [2 frames of cogworker_django left out]"
    assert "/srv/shop/jobs.py" in lines[2]


# Wording ----------------------------------------------------------------------------------


def test_failures_say_what_retry_allows(admin_client, r):
    add_to(r, "dead", make_job(retry=2, retry_count=3, error_class="E", error_message="x"))
    key = DeadSet().page()[0].key
    html = admin_client.get(url("deadjob", "job"), {"key": key}).content.decode()
    assert "Failed 3 times; retry=2 allows 2 retries after the first run" in html
    assert " of 2<" not in html


def test_a_job_filed_in_dead_without_a_failed_run_says_it_was_never_retried(admin_client, r):
    """A payload naming no registered job (or orphaned too often) goes to dead at once:
    its detail does not say "Never failed; retry=True allows 25 retries"."""
    add_to(r, "dead", make_job(error_class="NotRegistered", error_message="not registered"))
    key = DeadSet().page()[0].key
    html = admin_client.get(url("deadjob", "job"), {"key": key}).content.decode()
    assert "Never retried: NotRegistered sends a job to dead at once" in html
    assert "Never failed" not in html and "allows 25 retries" not in html


def test_one_job_in_a_queue_is_one_job(admin_client, r):
    push(r, make_job(queue="solo"))
    html = admin_client.get(url("queue", "jobs"), {"name": "solo"}).content.decode()
    assert '<span class="cw-count">1 job</span>' in html and "1 queue" not in html


def test_retry_messages_agree_with_the_count(admin_client, r):
    add_to(r, "dead", make_job())
    one = admin_client.post(
        url("deadjob", "action"), {"action": "retry", "key": DeadSet().page()[0].key}, follow=True
    )
    assert "1 job sent to its queue." in messages_of(one)
    add_to(r, "dead", make_job())
    add_to(r, "dead", make_job())
    keys_ = [rec.key for rec in DeadSet().page()]
    two = admin_client.post(
        url("deadjob", "action"), {"action": "retry", "key": keys_}, follow=True
    )
    assert "2 jobs sent to their queues." in messages_of(two)


def test_retry_now_is_not_offered_for_an_undecodable_entry(admin_client, r):
    r.zadd(keys.dead(keys.home_of("default")), {b"\xff not a payload": time.time()})
    key = DeadSet().page()[0].key
    html = admin_client.get(url("deadjob", "job"), {"key": key}).content.decode()
    assert 'data-action="delete"' in html and 'data-action="retry"' not in html


# Delete one queued job, find a job --------------------------------------------------------


def test_delete_one_job_from_a_queue(admin_client, r):
    keep, drop = make_job("a.b", 1, queue="mail"), make_job("a.b", XSS, queue="mail")
    push(r, keep)
    push(r, drop)
    html = admin_client.get(url("queue", "jobs"), {"name": "mail"}).content.decode()
    assert html.count('data-action="delete_job"') == 2
    record = next(x for x in Queue("mail").jobs(0, 5) if x.jid == drop["jid"])
    response = post(
        admin_client, "queue", "delete_job", name="mail", key=record.key, jid=drop["jid"]
    )
    assert response.status_code == 302
    assert [x.jid for x in Queue("mail").jobs(0, 5)] == [keep["jid"]]
    again = admin_client.post(
        url("queue", "action"),
        {"action": "delete_job", "name": "mail", "key": record.key, "jid": drop["jid"]},
        follow=True,
    )
    assert any("no longer in queue 'mail'" in m for m in messages_of(again))
    assert Queue("mail").size() == 1


def test_deleting_a_queued_job_needs_the_delete_permission(staff_client, r):
    job = make_job(queue="mail")
    push(r, job)
    key = Queue("mail").jobs(0, 1)[0].key
    viewer = staff_client("view_queue", "change_queue")
    html = viewer.get(url("queue", "jobs"), {"name": "mail"}).content.decode()
    assert 'data-action="delete_job"' not in html
    data = {"action": "delete_job", "name": "mail", "key": key, "jid": job["jid"]}
    assert viewer.post(url("queue", "action"), data).status_code == 403
    csrf = staff_client("view_queue", "delete_queue", csrf=True)
    assert csrf.post(url("queue", "action"), data).status_code == 403  # no CSRF token
    assert Queue("mail").size() == 1
    assert (
        staff_client("view_queue", "delete_queue").post(url("queue", "action"), data).status_code
        == 302
    )
    assert Queue("mail").size() == 0


def test_find_a_job_by_jid_shows_each_place_the_user_may_view(admin_client, staff_client, r):
    job = make_job("shop.jobs.charge", XSS, queue="billing")
    push(r, job)
    add_to(r, "dead", {**job, "error_class": "E", "error_message": XSS})
    dashboard = admin_client.get(url("dashboard")).content.decode()
    assert 'id="cw-find"' in dashboard
    html = admin_client.get(url("dashboard", "find"), {"jid": job["jid"]}).content.decode()
    assert 'data-where="queue"' in html and 'data-where="dead"' in html
    assert "/admin/cogworker_django/deadjob/job/?key=" in html
    assert XSS not in html and "&lt;script&gt;" in html
    limited = staff_client("view_dashboard", "view_queue")
    html = limited.get(url("dashboard", "find"), {"jid": job["jid"]}).content.decode()
    assert 'data-where="queue"' in html and 'data-where="dead"' not in html
    assert "1 more place hidden" in html
    assert staff_client("view_queue").get(url("dashboard", "find"), {"jid": "x"}).status_code == 403


def test_find_says_nowhere_and_refuses_a_bad_jid(admin_client):
    html = admin_client.get(url("dashboard", "find"), {"jid": "0" * 24}).content.decode()
    assert 'id="cw-find-none"' in html
    html = admin_client.get(url("dashboard", "find"), {"jid": 'a"b'}).content.decode()
    assert 'id="cw-find-error"' in html and "is not a job id" in html
