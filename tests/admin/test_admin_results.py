"""What the admin shows of kept results and progress (api/results.py): a bar and the
message on the Busy page, the status, progress and result or error on "Find a job";
everything escaped."""

import json
import time

import pytest

from cogworker_django.core import payload, results
from cogworker_django.store import connection, keys

from ..admin_support import fast_passwords_fixture, url  # noqa: F401 - autouse fixture
from ..api_support import make_job

pytestmark = [pytest.mark.django_db]

XSS = "<script>alert(1)</script>"


def _running(r, job):
    ident = "host:1:abc"
    r.sadd(keys.processes(), ident)
    info = {"hostname": "web-1", "pid": 4242, "concurrency": 2, "queues": ["default:1"]}
    r.hset(keys.process(ident), mapping={"info": json.dumps(info), "busy": 1, "beat": time.time()})
    r.hset(
        keys.work(ident),
        "proc-0",
        json.dumps({"queue": "default", "payload": json.dumps(job), "run_at": time.time() - 5}),
    )


def test_busy_shows_each_running_jobs_progress(admin_client, r):
    job = make_job("app.jobs.Import", 1)
    _running(r, job)
    report = {"done": 40, "total": 160, "message": XSS, "at": time.time()}
    r.hset(keys.result(job["jid"]), "progress", json.dumps(report))
    html = admin_client.get(url("busyjob")).content.decode()
    assert '<progress max="100" value="25">25%</progress> 40 / 160' in html
    assert XSS not in html and "&lt;script&gt;" in html


def test_busy_without_progress_shows_none(admin_client, r):
    _running(r, make_job("app.jobs.Quiet", 1))
    html = admin_client.get(url("busyjob")).content.decode().replace("<wbr>", "")
    assert "app.jobs.Quiet" in html and "<progress" not in html


def test_find_shows_the_kept_result(admin_client, r):
    job = {"jid": payload.new_jid(), "func": "app.jobs.Add", "queue": "default"}
    results.keep(connection.get_client(), [results.ended(job, "succeeded", value={"x": XSS})])
    html = admin_client.get(url("dashboard", "find"), {"jid": job["jid"]}).content.decode()
    assert "Status: succeeded" in html and 'id="cw-find-value"' in html
    assert XSS not in html and "&lt;script&gt;" in html
    assert "what it kept is above" in html


def test_find_shows_a_dead_jobs_error(admin_client, r):
    job = {
        "jid": payload.new_jid(),
        "func": "app.jobs.Sync",
        "queue": "default",
        "error_class": "RuntimeError",
        "error_message": XSS,
        "traceback": "Traceback (most recent call last):\n  boom\n",
    }
    results.keep(connection.get_client(), [results.ended(job, "dead", error=results.error_of(job))])
    html = admin_client.get(url("dashboard", "find"), {"jid": job["jid"]}).content.decode()
    assert "Status: dead" in html and 'id="cw-find-error-class">RuntimeError' in html
    assert "Traceback (most recent call last)" in html and XSS not in html
