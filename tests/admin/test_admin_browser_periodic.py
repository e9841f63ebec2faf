"""The Periodic schedule's form in Chromium (Playwright, as tests/admin/test_admin_browser.py),
with a real worker: add a database entry, see the next fire times as the cron line is
typed, get a "did you mean" for a mistyped job, save, and see the entry fire (its run's
payload names it) and its last run on the page.

The entries live in a SQLite file the worker reads too ("durable_sqlite", routed by the
test project's router). Screenshots: admin-periodicentry-form.png and
admin-periodicentry-database.png (docs/admin.md)."""

from __future__ import annotations

import os
import time

import pytest

from cogworker_django.models import PeriodicEntry

from ..admin_support import fast_passwords_fixture, screenshots_fixture  # noqa: F401 - fixtures
from ..helpers import wait_until
from ..periodic import db_support as db
from .test_admin_browser import CHROMIUM, CHROMIUM_ARGS, _shot

pytestmark = [
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"no Chromium at {CHROMIUM}: install it with `apt-get install chromium`",
    ),
    pytest.mark.django_db(databases=["default", "durable_sqlite"], transaction=True),
]

SETTINGS_ENTRIES = {
    "nightly-report": {
        "cron": "0 3 * * *",
        "job": "testapp.jobs.record",
        "args": ["report"],
        "timezone": "Europe/Paris",
        "unique": "until_executed",
    },
}


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
