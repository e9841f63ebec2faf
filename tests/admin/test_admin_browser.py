"""The admin in a real browser: Debian's Chromium driven by Playwright against a live
server, with a real worker subprocess. Logs in, opens every page (a screenshot of each),
retries a dead job and sees it leave Dead, pauses a queue and sees it marked paused,
quiets the running worker and sees it marked quiet.

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

from cogworker_django import Batch, history
from cogworker_django.api import DeadSet, ProcessSet
from cogworker_django.api import history as api_history
from cogworker_django.controls import limits
from cogworker_django.store import keys
from cogworker_django.worker import keyguard
from cogworker_django.workflows.middleware import BatchMiddleware

from ..admin_support import (  # noqa: F401 - fixtures
    PAGES,
    fast_passwords_fixture,
    screenshots_fixture,
)
from ..api_support import add_to, make_job, push
from ..helpers import wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

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
