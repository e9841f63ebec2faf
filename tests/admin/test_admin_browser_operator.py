"""The admin in Chromium (Playwright, as tests/admin/test_admin_browser.py): every page at 1280
and 1400 px wide without horizontal overflow, buttons inside the window and column
headers apart; and the operator's pages: jobs awaiting recovery, a job found by jid,
one queued job deleted, a big payload cut with its raw JSON downloadable, a queue key of
the wrong type, Redis without persistence."""

from __future__ import annotations

import json
import os

import pytest

from cogworker_django.api import DeadSet, Queue
from cogworker_django.core import payload
from cogworker_django.store import keys

from ..admin_support import PAGES, fast_passwords_fixture  # noqa: F401 - autouse fixture
from ..api_support import add_to, make_job, push
from .test_admin_browser import CHROMIUM, CHROMIUM_ARGS, PERIODIC, _populate

pytestmark = [
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"no Chromium at {CHROMIUM}: install it with `apt-get install chromium`",
    ),
]

# Every pair of neighbouring column headers whose texts are closer than this (px).
LAYOUT_JS = """() => {
  const width = window.innerWidth;
  const problems = [];
  if (document.documentElement.scrollWidth > width + 1)
    problems.push(`page ${document.documentElement.scrollWidth}px wide`);
  for (const el of document.querySelectorAll('button, input[type=submit], a.button')) {
    const b = el.getBoundingClientRect();
    if (b.width && b.right > width) problems.push(`button ${el.textContent.trim() || el.value} ends at ${b.right}`);
  }
  for (const tr of document.querySelectorAll('thead tr')) {
    const boxes = [...tr.children].filter(th => th.textContent.trim() && th.getClientRects().length
      && !th.classList.contains('action-checkbox-column'))
      .map(th => { const r = document.createRange(); r.selectNodeContents(th);
                   const b = r.getBoundingClientRect(); return [th.textContent.trim(), b.left, b.right]; });
    for (let i = 0; i + 1 < boxes.length; i++)
      if (boxes[i + 1][1] - boxes[i][2] < 8) problems.push(`headers ${boxes[i][0]}|${boxes[i + 1][0]} touch`);
  }
  return problems;
}"""


def _operator_data(r, now_redis: float) -> dict:
    """What the operator pages show: a dead process's jobs, a big dead payload."""
    orphan = make_job("shop.jobs.charge_card", 5001, queue="default")
    ident = "worker-7:4242:cafe"
    r.sadd(keys.inprogress_ids(), ident)
    r.hset(keys.last_beat(), ident, int(now_redis) - 30)
    r.lpush(keys.inprogress(ident, keys.home_of("default")), payload.encode(orphan))
    big = make_job(
        "shop.jobs.import_rows", "row," * 200_000, error_class="ValueError", error_message="bad row"
    )
    add_to(r, "dead", big)
    return {"orphan": orphan, "identity": ident, "big": big}


def test_operator_pages_in_a_real_browser(
    live_server, transactional_db, django_user_model, r, monkeypatch, settings, configure
):
    from playwright.sync_api import expect, sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    configure(MAX_PAYLOAD_BYTES=10_000_000)  # the big payload below, written by another producer
    django_user_model.objects.create_superuser("operator", "op@example.com", "secret-pw")
    settings.COGWORKER_PERIODIC = PERIODIC
    # The admin shows the schedule the workers published: publish it as a worker would.
    from cogworker_django.periodic import entries

    for e in entries.load():
        r.hset(keys.periodic_schedule(), e.name, json.dumps(e.as_dict()))
    _populate(r)
    seconds, micros = r.time()
    data = _operator_data(r, seconds + micros / 1e6)
    doomed = make_job("shop.jobs.send_receipt", 9999, queue="mail")
    push(r, doomed)
    r.sadd(keys.queues(), "broken")
    r.set(keys.queue("broken"), "someone SET this")
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
            expect(page.locator("#content")).to_contain_text("Cogworker")

            dead_key = next(x.key for x in DeadSet().page() if x.jid == data["big"]["jid"])
            urls = [f"/admin/cogworker_django/{model}/" for model in PAGES] + [
                "/admin/cogworker_django/queue/jobs/?name=mail",
                f"/admin/cogworker_django/deadjob/job/?key={dead_key}",
                f"/admin/cogworker_django/dashboard/find/?jid={doomed['jid']}",
            ]
            for width in (1280, 1400):
                page.set_viewport_size({"width": width, "height": 900})
                for path in urls:
                    response = page.goto(base + path)
                    assert response is not None and response.status == 200, path
                    problems = page.evaluate(LAYOUT_JS)
                    if problems and os.environ.get("COGWORKER_LAYOUT_SHOTS"):
                        page.screenshot(
                            path=f"{os.environ['COGWORKER_LAYOUT_SHOTS']}/{width}-{path.strip('/').replace('/', '_')[:60]}.png",
                            full_page=True,
                        )
                    assert problems == [], f"{path} at {width} px"

            # Jobs of a dead process, awaiting recovery.
            page.goto(f"{base}/admin/cogworker_django/dashboard/")
            expect(page.locator("#awaiting-recovery")).to_have_text("1")
            page.click("a[href$='#awaiting-recovery']")
            orphan = page.locator(f'.cw-orphan[data-identity="{data["identity"]}"]')
            expect(orphan).to_contain_text("shop.jobs.charge_card")
            expect(orphan.locator(".cw-recovery")).to_contain_text("not before")

            # Redis without persistence (the test Redis keeps nothing) and a broken queue.
            page.goto(f"{base}/admin/cogworker_django/dashboard/")
            expect(page.locator("#cw-no-persistence")).to_contain_text("keeps nothing on disk")
            page.goto(f"{base}/admin/cogworker_django/queue/")
            expect(page.locator('tr[data-queue="broken"] td.state')).to_contain_text("wrong type")

            # Find a job by jid from the dashboard, then delete it from its queue.
            page.goto(f"{base}/admin/cogworker_django/dashboard/")
            page.fill("#cw-find #cw-find-jid", doomed["jid"])
            page.click("#cw-find input[type=submit]")
            found = page.locator('tr[data-where="queue"]')
            expect(found).to_contain_text("shop.jobs.send_receipt")
            found.locator("a").click()
            row = page.locator(f'tr[data-jid="{doomed["jid"]}"]')
            expect(row).to_have_count(1)
            row.locator('button[data-action="delete_job"]').click()
            expect(page.locator("ul.messagelist")).to_contain_text(f"Job {doomed['jid']}")
            expect(page.locator(f'tr[data-jid="{doomed["jid"]}"]')).to_have_count(0)
            assert Queue("mail").find(doomed["jid"]) is None

            # A big payload: cut on its page, whole in the download.
            page.goto(f"{base}/admin/cogworker_django/deadjob/job/?key={dead_key}")
            expect(page.locator("#cw-args-cut")).to_contain_text("Download the raw JSON")
            href = page.locator("#cw-download").get_attribute("href")
            download = page.request.get(base + href)
            assert download.ok and download.headers["content-disposition"].startswith("attachment")
            assert json.loads(download.body())["jid"] == data["big"]["jid"]
        finally:
            browser.close()
