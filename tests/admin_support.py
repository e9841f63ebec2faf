"""Fixtures and helpers for the admin tests (imported by the test modules)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from cogworker_django import history
from cogworker_django.api import history as api_history
from cogworker_django.store import runtime

# Debian's Chromium, driven by Playwright in the browser tests.
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

# Model name of each page (URL admin:cogworker_django_<model>_changelist).
PAGES = (
    "dashboard",
    "queue",
    "process",
    "busyjob",
    "scheduledjob",
    "retryjob",
    "deadjob",
    "periodicentry",
    "limiter",
    "batch",
    "jobrun",
    "quarantinedkey",
)


def url(model: str, suffix: str = "changelist") -> str:
    return reverse(f"admin:cogworker_django_{model}_{suffix}")


# Test modules import these two by their function names; the fixtures' names differ so an
# argument named like the fixture doesn't shadow the import.
@pytest.fixture(autouse=True, name="fast_passwords")
def fast_passwords_fixture(settings):
    """Creating users hashes passwords: the default hasher costs about a second here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(name="screenshots")
def screenshots_fixture(tmp_path) -> Path:
    """Where the browser tests save their screenshots: a temporary directory, or
    $COGWORKER_SCREENSHOTS (scripts/screenshots sets docs/img)."""
    target = os.environ.get("COGWORKER_SCREENSHOTS")
    path = Path(target) if target else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(name="staff_client")
def staff_client_fixture(django_user_model):
    """``staff_client("view_deadjob", "change_deadjob")``: a logged-in staff user (not a
    superuser) with exactly these cogworker permissions."""
    n = 0

    def make(*codenames: str, csrf: bool = False) -> Client:
        nonlocal n
        n += 1
        user = django_user_model.objects.create_user(f"staff{n}", is_staff=True)
        for codename in codenames:
            user.user_permissions.add(
                Permission.objects.get(
                    codename=codename, content_type__app_label="cogworker_django"
                )
            )
        client = Client(enforce_csrf_checks=csrf)
        client.force_login(user)
        return client

    return make


def post(client: Client, model: str, action: str, **data) -> object:
    return client.post(url(model, "action"), {"action": action, **data})


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


@pytest.fixture(name="browser_page")
def browser_page_fixture(live_server, transactional_db, django_user_model, monkeypatch):
    """A logged-in admin page in Chromium: ``open(path, width)`` returns the page."""
    from playwright.sync_api import expect, sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    django_user_model.objects.create_superuser("operator", "op@example.com", "secret-pw")
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(20_000)
        expect.set_options(timeout=20_000)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{live_server.url}/admin/login/?next=/admin/")
        page.fill("#id_username", "operator")
        page.fill("#id_password", "secret-pw")
        page.click("input[type=submit]")
        page.wait_for_url("**/admin/")

        def open_(path: str, width: int = 1280):
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(f"{live_server.url}{path}")
            return page

        try:
            yield open_
        finally:
            browser.close()
            history.buffer.clear()
            runtime.current().of(api_history.DigestStates).clear()
    assert errors == []
