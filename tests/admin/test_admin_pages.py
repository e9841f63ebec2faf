"""Every admin page with Django's test client (as a superuser): what it shows, escaping,
undecodable payloads, pagination, search, detail pages, and the pages shown when Redis
is down or a feature's module is missing."""

import json
import re
import time

import pytest

from cogworker_django.api import DeadSet
from cogworker_django.api import quarantine as quarantine_api
from cogworker_django.store import keys

from ..admin_support import PAGES, fast_passwords_fixture, url  # noqa: F401 - autouse fixture
from ..api_support import add_to, make_job, push

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.cluster,
    pytest.mark.spread,
]  # cluster: tests/cluster_support.py

XSS = "<script>alert(1)</script>"


def test_cogworker_section_in_admin_index(admin_client):
    html = admin_client.get("/admin/").content.decode()
    assert "Cogworker" in html
    for label in (
        "Dashboard",
        "Queues",
        "Processes",
        "Busy",
        "Scheduled",
        "Retries",
        "Dead",
        "Periodic schedule",
        "Limits",
        "Batches",
        "History",
        "Quarantined keys",
    ):
        assert f">{label}</a>" in html
    app_index = admin_client.get("/admin/cogworker_django/").content.decode()
    # Every entry is a "View" link, none "Change"; the one "Add" is the periodic
    # schedule's (its database entries).
    assert app_index.count('class="viewlink"') == 12
    assert 'class="changelink"' not in app_index
    assert app_index.count('class="addlink"') == 1
    assert 'href="/admin/cogworker_django/periodicentry/add/" class="addlink"' in app_index


@pytest.mark.parametrize("model", PAGES)
def test_every_page_renders_with_breadcrumbs(admin_client, model):
    response = admin_client.get(url(model))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="breadcrumbs"' in html and 'href="/admin/cogworker_django/"' in html
    assert "cogworker_django/admin.css" in html
    # Nothing loaded from elsewhere (a CDN): every src and href is on this site. (Not a
    # search for "cdn" in the page: a random CSRF token can hold those letters.)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html, re.I), html


def test_dashboard_counts_and_chart(admin_client, r):
    import datetime as dt

    today = dt.datetime.now(dt.UTC).date().isoformat()
    r.set(keys.stat("processed"), 1234)
    r.set(keys.stat("failed"), 56)
    r.set(keys.stat("processed", today), 78)
    r.set(keys.stat("failed", today), 9)
    push(r, make_job(queue="mail"))
    add_to(r, "dead", make_job())
    html = admin_client.get(url("dashboard")).content.decode()
    assert 'id="processed-total">1234<' in html and 'id="failed-total">56<' in html
    assert 'id="processed-today">78<' in html and 'id="failed-today">9<' in html
    assert 'id="dead-size">1<' in html and ">mail<" in html
    assert html.count('class="cw-dot processed"') == 30
    assert (
        "<svg" in html
        and "<script" not in html.split('<div id="content-main"')[1].split("</main>")[0]
    )


def test_the_dashboard_comes_first_in_the_section(admin_client):
    """In the admin index and its sidebar, the Cogworker pages come in their own order,
    Dashboard first (the site sorts by name: Batches and Busy came before it)."""
    html = admin_client.get("/admin/").content.decode()
    section = html.split('class="app-cogworker_django')[1].split("</table>")[0]
    names = re.findall(r'<a href="/admin/cogworker_django/[a-z]+/">([^<]+)</a>', section)
    assert names[:3] == ["Dashboard", "Queues", "Processes"], names
    assert names.index("Batches") > names.index("Dead")


def test_the_dashboard_shows_a_queue_no_worker_reads_as_such(admin_client, r):
    """As the Queues page does: a queue nobody reads is not "active" (a mistyped name)."""
    push(r, make_job(queue="defualt"))
    push(r, make_job(queue="mail"))
    r.zadd(keys.live_queues(), {"mail": time.time()})  # a worker reads "mail"
    html = admin_client.get(url("dashboard")).content.decode()
    table = html.split('id="dashboard-queues"')[1].split("</table>")[0]
    rows = {row.split("</td>")[0].split("<td>")[-1]: row for row in table.split("<tr>")[2:]}
    assert "no worker reads this queue" in rows["defualt"]
    assert "active" in rows["mail"] and "no worker reads" not in rows["mail"]


def test_queues_page_and_queue_jobs(admin_client, r):
    for i in range(30):
        push(r, make_job("app.jobs.Mail", f"arg{i}", queue="mail"))
    r.sadd(keys.paused(keys.home_of("default")), "mail")
    html = admin_client.get(url("queue")).content.decode()
    assert 'data-queue="mail"' in html and "paused" in html and ">30<" in html
    page2 = admin_client.get(url("queue", "jobs"), {"name": "mail", "p": 2}).content.decode()
    assert "&quot;arg25&quot;" in page2 and "&quot;arg29&quot;" in page2
    assert "&quot;arg0&quot;" not in page2
    assert admin_client.get(url("queue", "jobs")).status_code == 404


def test_job_arguments_and_errors_are_escaped(admin_client, r):
    job = make_job("app.jobs.x", XSS, queue=XSS, error_class=XSS, error_message=XSS, traceback=XSS)
    job["kwargs"] = {"k": XSS}
    add_to(r, "dead", job)
    push(r, job)
    for page in (
        url("deadjob"),
        url("queue"),
        url("queue", "jobs") + "?name=" + XSS,
        url("dashboard"),
    ):
        html = admin_client.get(page).content.decode()
        assert XSS not in html, page
        assert "&lt;script&gt;" in html, page
    rec = DeadSet().page()[0]
    html = admin_client.get(url("deadjob", "job"), {"key": rec.key}).content.decode()
    assert XSS not in html and html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4


def test_undecodable_payloads_render(admin_client, r):
    r.zadd(keys.dead(keys.home_of("default")), {b"\xff\xfe<b>not json": time.time()})
    r.zadd(keys.retry(keys.home_of("default")), {b"[1, 2]": time.time()})
    r.lpush(keys.queue("default"), b"\x00\xff")
    r.sadd(keys.queues(), "default")
    for model in ("deadjob", "retryjob"):
        html = admin_client.get(url(model)).content.decode()
        assert "undecodable" in html and "(unparseable)" in html
    assert "&lt;b&gt;not json" in admin_client.get(url("deadjob")).content.decode()
    html = admin_client.get(url("queue", "jobs"), {"name": "default"}).content.decode()
    assert "undecodable" in html
    rec = DeadSet().page()[0]
    html = admin_client.get(url("deadjob", "job"), {"key": rec.key}).content.decode()
    assert "Undecodable payload" in html and "&lt;b&gt;not json" in html


def test_sets_paginate_in_display_order(admin_client, r):
    now = time.time()
    for i in range(60):
        add_to(r, "schedule", make_job(token=i, queue=f"q{i:02d}"), now + i)
    html = admin_client.get(url("scheduledjob"), {"p": 3}).content.decode()
    assert ">q50<" in html and ">q59<" in html and ">q49<" not in html
    assert "60 jobs" in html
    # Out of range pages show the last one; garbage shows the first.
    assert ">q59<" in admin_client.get(url("scheduledjob"), {"p": 99}).content.decode()
    assert ">q00<" in admin_client.get(url("scheduledjob"), {"p": "x"}).content.decode()


def test_search_and_continue(admin_client, r):
    add_to(r, "retry", make_job("app.billing.Charge", error_message="card declined"))
    add_to(r, "retry", make_job("app.mail.Send", error_message="smtp down"))
    html = (
        admin_client.get(url("retryjob"), {"q": "DECLINED"}).content.decode().replace("<wbr>", "")
    )
    assert "app.billing.Charge" in html and "app.mail.Send" not in html
    assert "1 found of 2" in html and 'id="cw-search-more"' not in html
    html = (
        admin_client.get(url("retryjob"), {"q": "nothing-like-this"})
        .content.decode()
        .replace("<wbr>", "")
    )
    assert "Nothing found" in html


def test_search_over_a_large_set_offers_to_continue(admin_client, r):
    pipe = r.pipeline(transaction=False)
    members = {
        json.dumps({"jid": f"j{i}", "func": "f", "queue": "q", "args": [i]}): i
        for i in range(30000)
    }
    pipe.zadd(keys.dead(keys.home_of("default")), members)
    pipe.execute()
    html = admin_client.get(url("deadjob"), {"q": "no-match"}).content.decode()
    assert 'id="cw-search-more"' in html and "cursor=" in html


def test_detail_of_a_gone_job_is_404(admin_client):
    assert admin_client.get(url("deadjob", "job"), {"key": "1.5|abc"}).status_code == 404
    assert admin_client.get(url("deadjob", "job"), {"key": "junk"}).status_code == 404


def test_processes_and_busy_pages(admin_client, r):
    ident = "host:1:abc"
    r.sadd(keys.processes(), ident)
    r.hset(
        keys.process(ident),
        mapping={
            "info": json.dumps(
                {
                    "hostname": "web-1",
                    "pid": 4242,
                    "tag": XSS,
                    "concurrency": 7,
                    "queues": ["default:1"],
                    "rss_kb": 20480,
                    "started_at": time.time(),
                }
            ),
            "busy": 1,
            "quiet": "true",
            "beat": time.time(),
        },
    )
    job = make_job("app.jobs.Slow", XSS)
    r.hset(
        keys.work(ident),
        "proc-0",
        json.dumps({"queue": "default", "payload": json.dumps(job), "run_at": time.time() - 90}),
    )
    html = admin_client.get(url("process")).content.decode().replace("<wbr>", "")
    assert "web-1" in html and "4242" in html and "1 / 7" in html and "20.0 MB" in html
    assert "quiet</span>" in html and XSS not in html
    html = admin_client.get(url("busyjob")).content.decode().replace("<wbr>", "")
    assert "app.jobs.Slow" in html and "proc-0" in html and "1\xa0minute ago" in html
    assert XSS not in html


def test_redis_down_shows_503_page(admin_client, configure):
    from ..helpers import free_port

    configure(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    for model in ("dashboard", "deadjob", "queue", "process"):
        response = admin_client.get(url(model))
        assert response.status_code == 503
        assert "Redis is unavailable" in response.content.decode()


def test_wrong_type_key_shows_503_page_not_500(admin_client, r):
    r.set(keys.dead(keys.home_of("default")), "a string")
    response = admin_client.get(url("deadjob"))
    assert response.status_code == 503 and "WRONGTYPE" in response.content.decode()


def test_history_page_filters(admin_client):
    from cogworker_django import history

    mw = history.HistoryMiddleware()
    mw(make_job("app.jobs.Good"), "default", lambda: None)
    for _ in range(2):
        with pytest.raises(ValueError):
            mw(make_job("app.jobs.Bad"), "low", _raise(ValueError(XSS)))
    history.flush()
    try:
        html = admin_client.get(url("jobrun")).content.decode().replace("<wbr>", "")
        assert "app.jobs.Good" in html and "app.jobs.Bad" in html and "3 runs" in html
        assert XSS not in html and "&lt;script&gt;" in html
        html = (
            admin_client.get(url("jobrun"), {"status": "failed"})
            .content.decode()
            .replace("<wbr>", "")
        )
        assert "app.jobs.Good" not in html and "app.jobs.Bad" in html
        html = (
            admin_client.get(url("jobrun"), {"job": "app.jobs.Good"})
            .content.decode()
            .replace("<wbr>", "")
        )
        assert "app.jobs.Bad" not in html and "1 run of app.jobs.Good" in html
        assert "failure rate 0.0 %" in html
    finally:
        history.buffer.clear()


def _raise(exc):
    def run():
        raise exc

    return run


def test_quarantine_page_and_preview(admin_client, r):
    from cogworker_django.worker import keyguard

    r.set(keys.dead(keys.home_of("default")), XSS)
    assert keyguard.check()
    html = admin_client.get(url("quarantinedkey")).content.decode()
    assert keys.dead(keys.home_of("default")) in html and ">string<" in html
    copy = quarantine_api.quarantined()[0]["key"]
    html = admin_client.get(url("quarantinedkey", "preview"), {"key": copy}).content.decode()
    assert "&lt;script&gt;" in html and XSS not in html
    other = admin_client.get(url("quarantinedkey", "preview"), {"key": keys.queues()})
    assert other.status_code == 404


def test_periodic_page(admin_client, settings):
    settings.COGWORKER_PERIODIC = {
        "nightly": {
            "cron": "0 3 * * *",
            "job": "testapp.jobs.record",
            "args": [XSS],
            "timezone": "Europe/Paris",
            "unique": "until_executed",
        },
    }
    html = admin_client.get(url("periodicentry")).content.decode()
    assert 'data-entry="nightly"' in html and "Europe/Paris" in html and "0 3 * * *" in html
    assert "until_executed" in html and XSS not in html and 'data-action="disable"' in html


def test_chart_scale_and_filters():
    import datetime as dt

    from cogworker_django.admin import chart
    from cogworker_django.api import DayStat
    from cogworker_django.templatetags import cogworker_admin as f

    assert [chart._nice_max(v) for v in (0, 1, 3, 7, 11, 999, 1001)] == [
        1,
        1,
        5,
        10,
        20,
        1000,
        2000,
    ]
    today = dt.date(2026, 1, 30)
    days = [DayStat(today - dt.timedelta(days=29 - i), 0, 0) for i in range(30)]
    c = chart.build(days)
    assert len(c.dots) == 30 and c.y_ticks[0]["value"] == 0
    assert c.x_labels[0]["anchor"] == "start" and c.x_labels[-1]["anchor"] == "end"
    assert chart.build([]).dots == []
    assert [f.seconds(v) for v in (None, 0.25, 12.34, 125, 7300, 200000)] == [
        "–",
        "250 ms",
        "12.3 s",
        "2 min 5 s",
        "2 h 1 min",
        "2 d 7 h",
    ]
    assert [f.kilobytes(v) for v in (None, 512, 20480, 3 * 1024 * 1024)] == [
        "–",
        "512 KB",
        "20.0 MB",
        "3.00 GB",
    ]
    assert f.percent(0.143) == "14.3 %" and f.percent(None) == "–"
    assert f.when(None) == "–"
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30.5)
    assert ">in 30 s<" in f.when(soon)
