"""The admin's Batches page: progress and state of each batch, one batch's members with
links to where they wait, everything escaped, view permission required."""

from __future__ import annotations

import pytest
from testapp import jobs as tj

from cogworker_django import Batch, chain
from cogworker_django.store import keys
from cogworker_django.workflows.middleware import BatchMiddleware

from ..admin_support import fast_passwords_fixture, staff_client_fixture, url  # noqa: F401

pytestmark = pytest.mark.django_db

XSS = "<script>alert(1)</script>"


def test_batches_page_shows_progress_and_members(admin_client, r):
    import json

    with Batch(description=XSS, on_success=tj.wf_callback.s(XSS)) as batch:
        tj.wf_member.enqueue_many(["a", "b", "c"])
    first = json.loads(r.rpop(keys.queue("default")))
    BatchMiddleware()(first, "default", lambda: "a")
    stopped = chain(tj.wf_dead_unless_fixed.s(1), tj.wf_add.s(2)).enqueue()
    step = json.loads(r.lpop(keys.queue("default")))  # the newest: the chain step

    def fail():
        raise RuntimeError(XSS)

    with pytest.raises(RuntimeError):
        BatchMiddleware()(step, "default", fail)

    html = admin_client.get(url("batch")).content.decode()
    assert XSS not in html and "&lt;script&gt;" in html
    assert batch.bid in html and stopped.bid in html
    assert '<progress value="1" max="3"' in html
    assert "stopped" in html and "on_success waits" in html

    detail = admin_client.get(url("batch", "batch") + f"?bid={batch.bid}").content.decode()
    assert XSS not in detail
    assert detail.count("data-jid=") == 3
    assert "succeeded" in detail and "waiting" in detail
    assert url("scheduledjob") + "?q=" in detail  # a waiting member links to where it may be
    dead = admin_client.get(url("batch", "batch") + f"?bid={stopped.bid}").content.decode()
    assert XSS not in dead and "&lt;script&gt;" in dead
    assert url("deadjob") + f"?q={step['jid']}" in dead and "step 1 of 2" in dead
    assert admin_client.get(url("batch", "batch") + "?bid=nosuch").status_code == 404


def test_the_batches_page_needs_the_view_permission(staff_client):
    assert staff_client().get(url("batch")).status_code == 403
    assert staff_client().get(url("batch", "batch") + "?bid=x").status_code == 403
    assert staff_client("view_batch").get(url("batch")).status_code == 200
