"""Admin pages for what an operator looks for: jobs of dead processes awaiting recovery,
bounded rendering of big payloads with a download of the raw JSON, deleting one queued
job, finding a job by jid everywhere, a queue key of the wrong type, Redis without
persistence, and the wording of counts and messages."""

from __future__ import annotations

import json
import time

import pytest

from cogworker_django import keys

from .admin_support import (  # noqa: F401 - autouse fixture
    fast_passwords_fixture,
    messages_of,
    post,
    staff_client_fixture,
    url,
)
from .api_support import add_to, make_job, push

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
    r.lpush(keys.inprogress(ident), json.dumps(job))
    html = admin_client.get(url("process")).content.decode()
    section = html.split('id="awaiting-recovery"')[1]
    assert "shop.jobs.charge" in section and job["jid"] in section and "billing" in section
    assert "not before" in section and "4 min" in section  # 300 - 20 s, on Redis's clock
    assert "no worker is running" in section
    assert XSS not in html and "&lt;script&gt;" in section
    dashboard = admin_client.get(url("dashboard")).content.decode()
    assert 'id="awaiting-recovery">1<' in dashboard


def test_processes_page_says_when_nothing_awaits_recovery(admin_client):
    html = admin_client.get(url("process")).content.decode()
    assert 'id="cw-no-orphans"' in html
