"""The live dashboard in Chromium (Playwright): numbers, the per-job statistics and the
charts update after jobs run on a real worker, without a reload; Pause stops the
updates and Resume brings them back. Skips without /usr/bin/chromium."""

from __future__ import annotations

import os

import pytest
from testapp import jobs as tj

from cogworker_django import history
from cogworker_django.api import history as api_history
from cogworker_django.store import runtime

from ..admin_support import fast_passwords_fixture  # noqa: F401 - autouse fixture
from .test_admin_browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}"),
]


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
