"""The admin in Chromium (Playwright, as tests/admin/test_admin_browser.py): job names in a
narrow column wrap after their dots, never inside a name; the trend charts' legends name
the lines and their captions say the times are UTC, as rendered and after a live refresh;
and the dashboard never says "No runs recorded yet" while its counters count runs of a
real worker (the first reading of the history is said to be under way, and its result
replaces that without a reload, asked for every second meanwhile). Skips without
/usr/bin/chromium."""

from __future__ import annotations

import os
import re
import time

import pytest
from testapp import jobs as tj

from cogworker_django import Batch, conf, history
from cogworker_django.api import Stats
from cogworker_django.api import history as api_history
from cogworker_django.store import runtime

from ..admin_support import fast_passwords_fixture  # noqa: F401 - autouse fixture
from ..api_support import add_to, make_job
from ..helpers import wait_until
from .test_admin_browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}"),
]

# Every word (a run of non-space characters within one text node: a job name's parts
# between its dots are text nodes of their own) that a line break splits: a word laid out
# on two lines has client rectangles at two heights.
SPLIT_WORDS_JS = """(selector) => {
  const split = [];
  for (const el of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    const lines = new Set();
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0)
          .map(r => Math.round(r.top)));
        if (tops.size > 1) split.push(el.textContent.trim() + ': "' + m[0] + '"');
        tops.forEach(t => lines.add(t));
      }
    }
    el.dataset.lines = String(lines.size);
  }
  return split;
}"""


@pytest.fixture
def browser_page(live_server, transactional_db, django_user_model, monkeypatch):
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


def test_names_and_descriptions_never_wrap_inside_a_word(browser_page, r, tmp_path):
    now = time.time()
    for i, name in enumerate(("demo.jobs.flaky", "shop.payments.jobs.charge_card_again")):
        add_to(
            r,
            "dead",
            make_job(
                name,
                "https://example.com/" + "feed/" * 30,
                error_class="shop.errors.GatewayTimeout",
                error_message="the payment gateway timed out after 30 s; " * 6,
            ),
            now - 60 * i,
        )
    for width in (1280, 900, 700):
        page = browser_page("/admin/cogworker_django/deadjob/", width)
        assert page.evaluate(SPLIT_WORDS_JS, "a.cw-job") == [], width
        if width == 700:
            page.screenshot(path=str(tmp_path / "admin-deadjob-narrow.png"), full_page=True)
    # At 700 px the names do wrap (after a dot): the check above looked at wrapped names.
    lines = page.locator("a.cw-job").evaluate_all("els => els.map(e => +e.dataset.lines)")
    assert max(lines) > 1, lines
    # A batch's description wraps between its words ("supp|lier" before).
    with Batch(description="nightly import: 3 supplier feeds from the partner portal"):
        tj.wf_member.enqueue_many(["acme", "globex", "initech"])
    for width in (1280, 900):
        page = browser_page("/admin/cogworker_django/batch/", width)
        assert page.evaluate(SPLIT_WORDS_JS, "td.cw-text") == [], width
    lines = page.locator("td.cw-text").evaluate_all("els => els.map(e => +e.dataset.lines)")
    assert max(lines) > 1, lines


def _legends_and_captions(page) -> list[tuple[str, str]]:
    return page.locator(".cw-trend").evaluate_all(
        "figs => figs.map(f => [f.querySelector('figcaption').textContent,"
        " f.querySelector('.cw-legend').textContent])"
    )


def test_trend_legends_name_the_lines_and_captions_say_utc(browser_page, r):
    from playwright.sync_api import expect

    mw = history.HistoryMiddleware()
    for i in range(3):
        mw(make_job("shop.jobs.send_receipt", i, queue="mail"), "mail", lambda: None)
    history.flush()
    runtime.current().of(api_history.DigestStates).clear()
    api_history.digest()  # read before the page loads: the charts are on it
    page = browser_page("/admin/cogworker_django/dashboard/")
    rendered = _legends_and_captions(page)
    assert len(rendered) == 4
    for caption, legend in rendered:
        assert "UTC" in caption and "UTC" not in legend, (caption, legend)
        assert legend.split() in (["runs", "failed"], ["wait", "duration"]), legend
    # After a live refresh (live.js builds the charts again) the same texts.
    assert page.locator("#cw-live").get_attribute("data-updated-at") is None  # set by a poll
    expect(page.locator("#cw-live")).to_have_attribute("data-updated-at", re.compile("."))
    refreshed = _legends_and_captions(page)
    assert [(c, " ".join(legend.split())) for c, legend in refreshed] == [
        (c, " ".join(legend.split())) for c, legend in rendered
    ]


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


def test_the_dashboard_asks_again_sooner_while_the_history_is_read(browser_page, live_server):
    """On Playwright's fake clock (no waiting on real time): with the history being read
    the first poll of live.json comes after PENDING_INTERVAL (1 s), with the statistics
    on the page after LIVE_INTERVAL (5 s)."""
    from cogworker_django.admin import live

    mw = history.HistoryMiddleware()
    mw(make_job("shop.jobs.send_receipt", 1, queue="mail"), "mail", lambda: None)
    history.flush()
    page = browser_page("/admin/")
    polls: list[str] = []
    page.on("request", lambda req: "live.json" in req.url and polls.append(req.url))
    for pending in (True, False):
        runtime.current().of(api_history.DigestStates).clear()
        if not pending:
            api_history.digest()  # read: the page shows the statistics
        start = 1_800_000_000_000 if pending else 1_900_000_000_000  # ms, forward only
        page.clock.install(time=start)
        page.clock.pause_at(start + 1000)  # timers move only with run_for
        page.goto(f"{live_server.url}/admin/cogworker_django/dashboard/")
        root = page.locator("#cw-live")
        assert root.get_attribute("data-pending") == ("true" if pending else None)
        polls.clear()
        if pending:
            with page.expect_request(lambda req: "live.json" in req.url):
                page.clock.run_for(live.PENDING_INTERVAL * 1000 + 100)
            assert len(polls) == 1
        else:
            page.clock.run_for(live.PENDING_INTERVAL * 1000 + 100)
            page.evaluate("() => 1")  # a round trip to the page after the timers ran
            assert polls == []
            with page.expect_request(lambda req: "live.json" in req.url):
                page.clock.run_for(live.LIVE_INTERVAL * 1000)
