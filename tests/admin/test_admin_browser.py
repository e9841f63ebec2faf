"""The admin in a real browser beside real worker subprocesses: Debian's Chromium driven
by Playwright against a live server. These are the browser tests that need a worker
process (the others, tests/admin/test_admin_browser_*.py, need none):

- logs in, opens every page (a screenshot of each), retries a dead job and sees it leave
  Dead, pauses a queue and sees it marked paused, quiets the running worker and sees it
  marked quiet (in the process's log);
- the live dashboard: numbers, the per-job statistics and the charts update after jobs
  run, without a reload; Pause stops the updates and Resume brings them back;
- the Periodic schedule's form: add a database entry, see the next fire times as the
  cron line is typed, get a "did you mean" for a mistyped job, save, and see the entry
  fire (its run's payload names it) and its last run on the page. The entries live in a
  SQLite file the worker reads too ("durable_sqlite", routed by the test project's
  router). Screenshots: admin-periodicentry-form.png and admin-periodicentry-database.png
  (docs/admin.md);
- the dashboard never says "No runs recorded yet" while its counters count runs of a
  worker at the production timings (the first reading of the history is said to be
  under way, and its result replaces that without a reload).

Screenshots go to a temporary directory, or to $COGWORKER_SCREENSHOTS (the docs use
``COGWORKER_SCREENSHOTS=docs/img``). Skips only when /usr/bin/chromium is absent
(``apt-get install chromium``; .ci/run installs it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest
from testapp import jobs as tj

from cogworker_django import Batch, conf, history
from cogworker_django.api import DeadSet, ProcessSet, Stats
from cogworker_django.api import history as api_history
from cogworker_django.controls import limits
from cogworker_django.models import PeriodicEntry
from cogworker_django.store import keys, runtime
from cogworker_django.worker import keyguard
from cogworker_django.workflows.middleware import BatchMiddleware

from ..admin_support import (  # noqa: F401 - fixtures
    CHROMIUM,
    CHROMIUM_ARGS,
    PAGES,
    browser_page_fixture,
    fast_passwords_fixture,
    screenshots_fixture,
)
from ..api_support import add_to, make_job, push
from ..helpers import wait_until
from ..periodic import db_support as db

pytestmark = [
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"no Chromium at {CHROMIUM}: install it with `apt-get install chromium` "
        "(.ci/run does) to run the browser tests",
    ),
]


def _populate(r) -> None:
    """Enough of everything for each page to show something (and for the screenshots)."""
    today = dt.datetime.now(dt.UTC).date()
    for i in range(30):
        day = (today - dt.timedelta(days=29 - i)).isoformat()
        r.set(keys.stat("processed", day), 800 + (i * 137) % 600)
        r.set(keys.stat("failed", day), (i * 7) % 40)
    r.set(keys.stat("processed"), 48213)
    r.set(keys.stat("failed"), 615)
    now = time.time()
    for i in range(12):
        job = make_job("shop.jobs.send_receipt", 1000 + i, queue="mail")
        job["enqueued_at"] = now - 40 + i
        push(r, job)
    for i in range(3):
        push(r, make_job("shop.jobs.rebuild_index", f"shard-{i}", queue="low"))
    for i in range(4):
        add_to(
            r,
            "schedule",
            make_job("shop.jobs.remind_cart", 77 + i, queue="mail"),
            now + 600 * (i + 1),
        )
    for i in range(3):
        add_to(
            r,
            "retry",
            make_job(
                "shop.jobs.charge_card",
                5000 + i,
                queue="default",
                retry_count=i + 1,
                error_class="shop.errors.GatewayTimeout",
                error_message="payment gateway timed out after 30 s",
            ),
            now + 60 * (i + 1),
        )
    add_to(
        r,
        "dead",
        make_job(
            "shop.jobs.import_feed",
            "https://example.com/feed.xml",
            error_class="ValueError",
            error_message="<feed> is not valid XML: line 1, column 0",
        ),
        now - 3600,
    )
    add_to(
        r,
        "dead",
        make_job(
            "shop.jobs.sync_stock",
            42,
            queue="low",
            token="to-retry",
            error_class="KeyError",
            error_message="'sku-42'",
        ),
        now - 60,
    )
    r.zadd(keys.dead(keys.home_of("default")), {b"\xff\xfe not a payload": now - 7200})
    # History: real runs through the history middleware.
    mw = history.HistoryMiddleware()
    for i in range(6):
        mw(make_job("shop.jobs.send_receipt", i, queue="mail"), "mail", lambda: time.sleep(0.001))

    def fail():
        raise TimeoutError("payment gateway timed out")

    try:
        mw(make_job("shop.jobs.charge_card", 9), "default", fail)
    except TimeoutError:
        pass
    history.flush()
    # A key of the wrong type, moved aside by the key guard.
    r.set(keys.queues() + ":typo", "x")
    r.delete(keys.paused(keys.home_of("default")))
    r.set(keys.paused(keys.home_of("default")), "someone SET this by hand")
    keyguard.check()


# The bottom of what a page shows (its content, the sidebar's lists), in page
# coordinates: a screenshot ends there instead of at the window's bottom.
CONTENT_BOTTOM_JS = """() => Math.ceil(Math.max(...[...document.querySelectorAll(
  '#content, #nav-sidebar .module')].map(e => e.getBoundingClientRect().bottom))
  + window.scrollY)"""


def _shot(page, directory: Path, name: str) -> None:
    """The whole page and no more: a short page is not padded with the window's empty
    height (the docs show these images)."""
    width = page.viewport_size["width"]
    height = page.evaluate(CONTENT_BOTTOM_JS) + 24
    page.screenshot(
        path=str(directory / f"admin-{name}.png"),
        full_page=True,
        clip={"x": 0, "y": 0, "width": width, "height": height},
    )


# The limiters the screenshots show (the Limits page), one of them with a lease held.
SHOWN_LIMITS = {
    "payments-api": {"concurrency": 4},
    "mail-provider": {"rate": 10, "per": 1},
}


def _batches_and_limits(r):
    """A batch part done and a limiter lease held, for the Batches and Limits pages;
    returns the lease (released by the caller)."""
    with Batch(
        description="nightly import: 3 supplier feeds", on_success=tj.wf_callback.s("import")
    ):
        tj.wf_member.enqueue_many(["acme", "globex", "initech"])
    first = json.loads(r.rpop(keys.queue("default")))
    BatchMiddleware()(first, "default", lambda: "acme")
    return limits.take(["payments-api"], {"jid": "5f2c9e01a7b3", "func": "shop.jobs.charge_card"})


PERIODIC = {
    "nightly-report": {
        "cron": "0 3 * * *",
        "job": "testapp.jobs.record",
        "args": ["report"],
        "timezone": "Europe/Paris",
        "unique": "until_executed",
        "queue": "work",
    },
    "every-minute": {"cron": "* * * * *", "job": "testapp.jobs.noop", "queue": "work"},
}


def test_admin_in_a_real_browser(
    live_server,
    transactional_db,
    django_user_model,
    worker,
    r,
    screenshots,
    monkeypatch,
    settings,
    configure,
):
    from playwright.sync_api import expect, sync_playwright

    # The Playwright sync API runs an event loop in this thread; Django's async-safety
    # check would refuse the test's own ORM use at teardown.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    django_user_model.objects.create_superuser("operator", "op@example.com", "secret-pw")
    settings.COGWORKER_PERIODIC = PERIODIC  # the admin's view of the schedule
    configure(LIMITS=SHOWN_LIMITS)
    _populate(r)
    lease = _batches_and_limits(r)
    w = worker(args=["-q", "work"], settings={"CONCURRENCY": 3}, periodic=PERIODIC)
    tj.slow.using(queue="work").enqueue(60, "busy-in-browser")
    identity = wait_until(lambda: ProcessSet().identities(), 15, message="worker listed")[0]
    wait_until(lambda: r.hlen(keys.work(identity)), 15, message="busy job in the snapshot")
    retry_jid = next(x.jid for x in DeadSet().page() if x.job.get("token") == "to-retry")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.set_default_timeout(15_000)
                base = live_server.url

                # Log in.
                page.goto(f"{base}/admin/login/?next=/admin/")
                page.fill("#id_username", "operator")
                page.fill("#id_password", "secret-pw")
                page.click("input[type=submit]")
                expect(page.locator("#content")).to_contain_text("Cogworker")
                page.goto(f"{base}/admin/cogworker_django/")
                _shot(page, screenshots, "index")

                # Every page opens, with its title. (The history read first, so the
                # dashboard shows its statistics rather than "Reading the run history".)
                api_history.digest()
                for model in PAGES:
                    response = page.goto(f"{base}/admin/cogworker_django/{model}/")
                    assert response is not None and response.status == 200, model
                    expect(page.locator("ol.breadcrumbs")).to_contain_text("Cogworker")
                    _shot(page, screenshots, model)
                page.goto(f"{base}/admin/cogworker_django/queue/jobs/?name=mail")
                expect(page.locator("#result_list")).to_contain_text("shop.jobs.send_receipt")
                _shot(page, screenshots, "queue-jobs")
                page.goto(f"{base}/admin/cogworker_django/deadjob/")
                page.click("a.cw-job >> text=shop.jobs.import_feed")
                expect(page.locator(".cw-detail")).to_contain_text("<feed> is not valid XML")
                _shot(page, screenshots, "deadjob-detail")

                # Retry a dead job: it leaves Dead.
                page.goto(f"{base}/admin/cogworker_django/deadjob/")
                row = page.locator(f'tr[data-jid="{retry_jid}"]')
                expect(row).to_have_count(1)
                row.locator("input.action-select").check()
                page.select_option("#cw-action", "retry")
                page.click("#cw-run-action")
                expect(page.locator("ul.messagelist")).to_contain_text("1 job sent to its queue")
                expect(page.locator(f'tr[data-jid="{retry_jid}"]')).to_have_count(0)
                assert DeadSet().find(retry_jid) is None

                # Pause a queue: it is marked paused.
                page.goto(f"{base}/admin/cogworker_django/queue/")
                page.locator('tr[data-queue="low"] button[data-action="pause"]').click()
                expect(page.locator('tr[data-queue="low"] td.state')).to_have_text("paused")
                assert r.sismember(keys.paused(keys.home_of("default")), "low")

                # Quiet the running worker: it is marked quiet once it has heard and beaten.
                page.goto(f"{base}/admin/cogworker_django/process/")
                proc_row = page.locator(f'tr[data-identity="{identity}"]')
                expect(proc_row.locator("td.state")).to_have_text("running")
                proc_row.locator('button[data-action="quiet"]').click()
                expect(page.locator("ul.messagelist")).to_contain_text("asked to quiet")

                def shows_quiet() -> bool:
                    page.reload()
                    return (
                        page.locator(f'tr[data-identity="{identity}"] td.state').inner_text()
                        == "quiet"
                    )

                wait_until(shows_quiet, 15, interval=0.3, message="process marked quiet")
                w.wait_for_log("quiet requested from the admin")
                _shot(page, screenshots, "process-quiet")
            finally:
                browser.close()
    finally:
        limits.release(lease)
        history.buffer.clear()


def test_the_dashboard_updates_itself(
    live_server, transactional_db, django_user_model, worker, monkeypatch
):
    from playwright.sync_api import expect, sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    runtime.current().of(api_history.DigestStates).clear()
    django_user_model.objects.create_superuser("operator", "op@example.com", "secret-pw")
    worker(args=["-q", "work"])
    errors: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.set_default_timeout(20_000)
                expect.set_options(timeout=20_000)  # a poll every 5 s
                base = live_server.url
                page.goto(f"{base}/admin/login/?next=/admin/")
                page.fill("#id_username", "operator")
                page.fill("#id_password", "secret-pw")
                page.click("input[type=submit]")
                page.goto(f"{base}/admin/cogworker_django/dashboard/")
                expect(page.locator("#processed-total")).to_have_text("0")
                toggle = page.locator("#cw-live-toggle")
                expect(toggle).to_be_visible()  # shown by the script

                for _ in range(4):
                    tj.noop.using(queue="work").enqueue()
                tj.fails_once_dead.using(queue="work").enqueue()
                # No reload: the poll brings the new numbers, rows and charts.
                expect(page.locator("#processed-total")).to_have_text("4")
                expect(page.locator("#dead-size")).to_have_text("1")
                stats = page.locator("#cw-job-stats")
                expect(stats).to_contain_text("testapp.jobs.noop")
                expect(
                    stats.locator("tr", has_text="testapp.jobs.fails_once_dead")
                ).to_contain_text("100.0 %")
                expect(page.locator("#chart-throughput-hour polyline")).to_have_count(2)
                expect(page.locator("#dashboard-processes tbody tr")).to_have_count(1)
                expect(page.locator("#cw-live-status")).to_contain_text("updated")

                shots = os.environ.get("COGWORKER_SCREENSHOTS")
                if shots:
                    page.screenshot(path=f"{shots}/admin-dashboard-live.png", full_page=True)
                toggle.click()
                expect(toggle).to_have_text("Resume")
                expect(page.locator("#cw-live")).to_have_attribute("data-paused", "true")
                expect(page.locator("#cw-live-status")).to_have_text("paused")
                toggle.click()
                expect(toggle).to_have_text("Pause")
                tj.noop.using(queue="work").enqueue()
                expect(page.locator("#processed-total")).to_have_text("5")
            finally:
                browser.close()
    finally:
        history.buffer.clear()
    assert errors == []


SETTINGS_ENTRIES = {
    "nightly-report": {
        "cron": "0 3 * * *",
        "job": "testapp.jobs.record",
        "args": ["report"],
        "timezone": "Europe/Paris",
        "unique": "until_executed",
    },
}


# This process (the admin) and the worker share the entries' SQLite file.
@pytest.mark.django_db(databases=["default", "durable_sqlite"], transaction=True)
def test_add_an_entry_in_the_browser_and_see_it_fire(
    live_server, django_user_model, worker, r, prefix, screenshots, monkeypatch, settings
):
    from playwright.sync_api import expect, sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    # This process (the admin) and the worker keep the entries in the same SQLite file.
    monkeypatch.setenv("TESTPROJECT_PERIODIC_DB", "durable_sqlite")
    settings.DATABASE_ROUTERS = ["testproject.routers.PeriodicEntriesRouter"]
    settings.COGWORKER_PERIODIC = SETTINGS_ENTRIES
    django_user_model.objects.create_superuser("operator", "op@example.com", "secret-pw")
    db.start_workers(worker, "durable_sqlite", 1, periodic=SETTINGS_ENTRIES)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.set_default_timeout(15_000)
            base = live_server.url
            page.goto(f"{base}/admin/login/?next=/admin/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "secret-pw")
            page.click("input[type=submit]")

            page.goto(f"{base}/admin/cogworker_django/periodicentry/")
            page.click(".object-tools a.addlink")
            expect(page.locator("h1")).to_contain_text("Add periodic entry")
            page.fill("#id_name", "every-two-seconds")
            page.fill("#id_description", "Refreshes the exchange rates")
            # The next fire times follow the cron line as it is typed.
            page.fill("#id_cron", "*/2 * * * * *")
            page.fill("#id_timezone", "Europe/Paris")
            times = page.locator("ul.cw-fire-times li")
            expect(times).to_have_count(5)
            first = times.first.inner_text()
            assert first.endswith(("CET", "CEST")) and int(first.split(":")[-1][:2]) % 2 == 0
            page.fill("#id_cron", "0 61 * * *")
            expect(page.locator(".cw-fire-times.errornote")).to_be_visible()
            page.fill("#id_cron", "*/2 * * * * *")
            expect(times).to_have_count(5)
            # A mistyped job: "did you mean".
            page.fill("#id_job", "testapp.jobs.periodic_nte")
            page.fill("#id_args", '["rates"]')
            page.click("input[name=_save]")
            expect(page.locator(".errorlist")).to_contain_text(
                "did you mean 'testapp.jobs.periodic_note'?"
            )
            assert not PeriodicEntry.objects.using("durable_sqlite").exists()
            _shot(page, screenshots, "periodicentry-form")
            page.fill("#id_job", "testapp.jobs.periodic_note")
            saved = time.time()
            page.click("input[name=_save]")
            expect(page.locator(".messagelist")).to_contain_text("was added successfully")
            row = page.locator('tr[data-entry="every-two-seconds"]')
            expect(row).to_contain_text("database")
            # It fires: the worker saw the new entry without a restart.
            note = wait_until(
                lambda: db.notes(r, prefix, "every-two-seconds"), 15, message="a run of it"
            )[0]
            assert note["args"] == ["rates"] and note["slot"] % 2 == 0
            assert note["at"] - saved < 10
            page.reload()
            last_run = row.locator("td").nth(4)
            expect(last_run).not_to_have_text("–")
            _shot(page, screenshots, "periodicentry-database")
        finally:
            browser.close()


# Recorded from the page's first parse on: every text the per-job statistics' table body
# and the processed counter had, so a state shown between two checks is seen too.
RECORD_JS = """
window.cwSeen = [];
new MutationObserver(() => {
  const body = document.querySelector('#cw-job-stats tbody');
  const total = document.getElementById('processed-total');
  if (body && total) {
    const seen = [total.textContent.trim(), body.textContent.trim()];
    const last = window.cwSeen[window.cwSeen.length - 1];
    if (!last || last[0] !== seen[0] || last[1] !== seen[1]) window.cwSeen.push(seen);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
document.addEventListener('DOMContentLoaded', () => {
  window.cwLoaded = [document.getElementById('processed-total').textContent.trim(),
                     document.querySelector('#cw-job-stats tbody').textContent.trim()];
});
"""


def test_the_dashboard_never_says_no_runs_while_it_counts_runs(browser_page, worker, tmp_path):
    """A real worker at the production heartbeat and poll intervals runs 13 jobs; a fresh
    admin process (no digest of the history yet) shows the dashboard: its table says the
    history is being read, never "No runs recorded yet", until the 13 runs replace it."""
    from playwright.sync_api import expect

    defaults = conf.DEFAULTS
    worker(
        args=["-q", "work"],
        settings={k: defaults[k] for k in ("HEARTBEAT_INTERVAL", "POLL_INTERVAL")},
    )
    for _ in range(13):
        tj.noop.using(queue="work").enqueue()
    wait_until(lambda: Stats().overview().processed == 13, 30, message="13 runs counted")
    runtime.current().of(
        api_history.DigestStates
    ).clear()  # this admin process has not read the history yet
    page = browser_page("/admin/login/")  # any page: the recorder is installed for the next
    page.add_init_script(RECORD_JS)
    page.goto(page.url.split("/admin/")[0] + "/admin/cogworker_django/dashboard/")
    expect(page.locator("#processed-total")).to_have_text("13")
    loaded = page.evaluate("window.cwLoaded")
    assert loaded == ["13", "Reading the run history…"], loaded
    page.screenshot(path=str(tmp_path / "admin-dashboard-pending.png"), full_page=True)
    row = page.locator("#cw-job-stats tbody tr", has_text="testapp.jobs.noop")
    expect(row).to_contain_text("13")  # the statistics arrive without a reload
    expect(page.locator("#cw-digest-pending")).to_have_count(0)
    expect(page.locator("#cw-live")).to_have_attribute("data-pending", "false")
    seen = page.evaluate("window.cwSeen")
    assert not [s for s in seen if "No runs recorded" in s[1]], seen
    page.screenshot(path=str(tmp_path / "admin-dashboard-read.png"), full_page=True)
