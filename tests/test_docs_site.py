"""The documentation site (mkdocs.yml, ``make docs``) as a reader opens it from disk:
built with --strict, every page of site/ opened over file:// in Chromium (Playwright, as
tests/admin/test_admin_browser.py) loads without one failed request or console error, shows
every image, and no link reads as a raw file name ("configuration.md"). Skips without
/usr/bin/chromium or without the docs tools (``make docs`` installs them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .admin.test_admin_browser import CHROMIUM, CHROMIUM_ARGS
from .helpers import ROOT

MKDOCS = Path(sys.executable).with_name("mkdocs")

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}"),
    pytest.mark.skipif(not MKDOCS.exists(), reason="no mkdocs in this venv: run `make docs`"),
]

# Link texts of the page's content, and images that did not load.
PAGE_JS = """() => ({
  links: [...document.querySelectorAll('article a[href]')].map(a => a.textContent.trim()),
  broken: [...document.images].filter(i => !i.complete || !i.naturalWidth).map(i => i.src),
})"""
RAW_NAME = re.compile(r"\b[\w-]+\.md\b")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def test_every_page_opens_from_disk_without_a_failed_request(site):
    from playwright.sync_api import sync_playwright

    # 404.html is the page a web server sends for a missing path, at any depth: its asset
    # links are absolute from the site's root, so it is not a page to open from disk.
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")
    assert len(pages) >= 20, pages
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            current = {"name": ""}
            # A request aborted (the favicon, say) was cut short by the next page's
            # loading, not refused: a missing file is ERR_FILE_NOT_FOUND.
            page.on(
                "requestfailed",
                lambda req: (
                    "ERR_ABORTED" not in (req.failure or "")
                    and problems.append(f"{current['name']}: {req.url} {req.failure}")
                ),
            )
            page.on(
                "console",
                lambda m: m.type == "error" and problems.append(f"{current['name']}: {m.text}"),
            )
            page.on("pageerror", lambda exc: problems.append(f"{current['name']}: {exc}"))
            for path in pages:
                current["name"] = str(path.relative_to(site))
                page.goto(path.as_uri(), wait_until="load")
                found = page.evaluate(PAGE_JS)
                problems += [f"{current['name']}: image {src} not shown" for src in found["broken"]]
                problems += [
                    f"{current['name']}: link text {text!r}"
                    for text in found["links"]
                    if RAW_NAME.search(text)
                ]
        finally:
            browser.close()
    assert problems == []
