"""The admin in Chromium (Playwright, as tests/admin/test_admin_browser.py): job names in a
narrow column wrap after their dots, never inside a name; the trend charts' legends name
the lines and their captions say the times are UTC, as rendered and after a live refresh;
and while the first reading of the history is under way the dashboard asks again every
second. (That it never says "No runs recorded yet" while its counters count a worker's
runs is in tests/admin/test_admin_browser.py, with the worker process.) Skips without
/usr/bin/chromium."""

from __future__ import annotations

import os
import re
import time

import pytest
from testapp import jobs as tj

from cogworker_django import Batch, history
from cogworker_django.api import history as api_history
from cogworker_django.store import runtime

from ..admin_support import (  # noqa: F401 - fixtures
    browser_page_fixture,
    fast_passwords_fixture,
)
from ..api_support import add_to, make_job
from .test_admin_browser import CHROMIUM

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
