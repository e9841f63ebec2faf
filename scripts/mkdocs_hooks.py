"""MkDocs hook: links from docs/ to the rest of the repository.

The pages link to files outside docs/ (``../tests/worker/test_worker_runs.py``,
``../cogworker_django/store/lua/...``), which MkDocs cannot check and would report as missing
documentation files. For each such link this hook

- fails the build when the target does not exist in the repository (every broken link
  is reported, then the build stops), and
- otherwise points the link at the repository's source: ``<repo_url>/blob/<branch>/<path>``
  when mkdocs.yml sets ``repo_url`` (branch from ``extra.repo_branch``, default ``main``),
  else a path relative to the built page, which resolves while the site sits in the
  repository (``site/``, the default ``site_dir``).

Links inside docs/ are left to MkDocs's own validation, but a link whose text is just the
page's file name (``[operations.md](operations.md#persistence)``, easy to write in a page
that is also read on GitHub) is shown with a proper text in the site: the page's title in
the nav, and the section's heading for an anchor ("Operations › Persistence").

Fenced code blocks and inline code are not touched.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from urllib.parse import unquote, urlsplit

from markdown.extensions.toc import slugify
from mkdocs.exceptions import PluginError

log = logging.getLogger("mkdocs.hooks.repo_links")

# A placeholder scheme that MkDocs leaves alone (it skips links with a scheme); replaced in
# the rendered HTML once the page's output path is known.
PLACEHOLDER = "repo-source:"

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.DOTALL)
# An inline link or image target: ](target) or ](target "title"); <target> form too.
_INLINE = re.compile(r"(\]\(\s*)(<[^>\n]*>|[^)\s]+)")
# A reference definition: [label]: target
_REFERENCE = re.compile(r"^( {0,3}\[[^\]\n]+\]:\s*)(<[^>\n]*>|\S+)", re.MULTILINE)

_broken: list[str] = []


def on_pre_build(config):
    _broken.clear()


def _repo_root(config) -> str:
    return os.path.dirname(os.path.abspath(config.config_file_path))


def _outside_target(url: str, page, config) -> str | None:
    """The repository-relative path ``url`` points to, if it leaves docs/; else None."""
    scheme, netloc, path, _query, _fragment = urlsplit(url)
    if scheme or netloc or not path or path.startswith(("/", "\\")):
        return None
    docs_dir = os.path.abspath(config.docs_dir)
    page_dir = os.path.dirname(os.path.join(docs_dir, page.file.src_path))
    target = os.path.normpath(os.path.join(page_dir, unquote(path)))
    if target == docs_dir or target.startswith(docs_dir + os.sep):
        return None
    root = _repo_root(config)
    rel = os.path.relpath(target, root)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        _broken.append(f"{page.file.src_uri}: '{url}' leaves the repository")
        return ""
    if not os.path.exists(target):
        _broken.append(f"{page.file.src_uri}: '{url}' -> {rel.replace(os.sep, '/')} does not exist")
        return ""
    return rel.replace(os.sep, "/") + ("/" if path.endswith("/") else "")


def _rewrite(text: str, page, config, files=None) -> str:
    if files is not None:
        text = _titled_links(text, page, config, files)

    def replace(match: re.Match) -> str:
        raw = match.group(2)
        url = raw[1:-1] if raw.startswith("<") else raw
        rel = _outside_target(url, page, config)
        if not rel:
            return match.group(0)
        parts = urlsplit(url)
        suffix = (f"?{parts.query}" if parts.query else "") + (
            f"#{parts.fragment}" if parts.fragment else ""
        )
        new = f"{PLACEHOLDER}{rel}{suffix}"
        return match.group(1) + (f"<{new}>" if raw.startswith("<") else new)

    # Leave inline code spans alone.
    out, last = [], 0
    for span in _CODE_SPAN.finditer(text):
        out.append(_INLINE.sub(replace, text[last : span.start()]))
        out.append(span.group(0))
        last = span.end()
    out.append(_INLINE.sub(replace, text[last:]))
    return _REFERENCE.sub(replace, "".join(out))


# A link whose text is a docs page's file name, maybe with its anchor, maybe as code:
# [operations.md](operations.md#persistence), [`jobs.md`](jobs.md).
_FILE_NAMED = re.compile(r"\[(`?)([\w./-]+\.md)(#[\w.-]*)?\1\]\(\s*([^)\s]+)\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def _nav_titles(nav, out: dict[str, str]) -> dict[str, str]:
    """src path -> title, from mkdocs.yml's nav."""
    for item in nav or []:
        if isinstance(item, dict):
            for title, value in item.items():
                if isinstance(value, str):
                    out[value] = title
                else:
                    _nav_titles(value, out)
    return out


def _headings(markdown: str) -> dict[str, str]:
    """anchor -> heading text of a page (outside fenced code), as the toc extension
    makes its anchors."""
    found, fence = {}, None
    for line in markdown.splitlines():
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(2)
            continue
        if fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                fence = None
            continue
        heading = _HEADING.match(line)
        if heading:
            text = heading.group(2)
            found.setdefault(slugify(re.sub(r"<[^>]+>", "", text), "-"), text)
    return found


def _titled_links(markdown: str, page, config, files) -> str:
    """Each link whose text is its target's file name, with the target's title instead."""
    titles = _nav_titles(config.nav, {})
    page_dir = posixpath.dirname(page.file.src_uri)

    def replace(match: re.Match) -> str:
        name, anchor, url = match.group(2), match.group(3) or "", match.group(4)
        target, _, fragment = url.partition("#")
        if posixpath.basename(target) != posixpath.basename(name) or (
            anchor and anchor[1:] != fragment
        ):
            return match.group(0)
        src = posixpath.normpath(posixpath.join(page_dir, target))
        file = files.get_file_from_path(src)
        if file is None or not src.endswith(".md"):
            return match.group(0)
        content = file.content_string
        heading = re.search(r"^#\s+(.+)$", content, re.MULTILINE)
        title = titles.get(src) or (heading.group(1).strip() if heading else src)
        # The title's head only: "Job controls", not "Job controls: time limits, ...".
        title = re.split(r": | \(", title, maxsplit=1)[0]
        section = _headings(content).get(fragment) if fragment else None
        text = f"{title} › {section}" if section and section != title else title
        return f"[{text}]({url})"

    return _FILE_NAMED.sub(replace, markdown)


def on_page_markdown(markdown: str, page, config, files):
    chunks, prose, fence = [], [], None
    for line in markdown.splitlines(keepends=True):
        opened = _FENCE.match(line)
        if fence is None and opened:
            chunks.append(_rewrite("".join(prose), page, config, files))
            prose, fence = [], opened.group(2)
            chunks.append(line)
        elif fence is not None:
            chunks.append(line)
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                fence = None
        else:
            prose.append(line)
    chunks.append(_rewrite("".join(prose), page, config, files))
    return "".join(chunks)


def _source_url(rel: str, page, config) -> str:
    repo_url = config.repo_url
    if repo_url:
        branch = (config.extra or {}).get("repo_branch", "main")
        return f"{repo_url.rstrip('/')}/blob/{branch}/{rel}"
    root = _repo_root(config)
    page_dir = posixpath.dirname(page.file.dest_uri)
    site_page_dir = os.path.join(os.path.abspath(config.site_dir), page_dir)
    url = os.path.relpath(os.path.join(root, rel), site_page_dir).replace(os.sep, "/")
    return url + ("/" if rel.endswith("/") else "")


def on_page_content(html: str, page, config, files):
    def replace(match: re.Match) -> str:
        rel, sep, rest = match.group(2).partition("#")
        path, qsep, query = rel.partition("?")
        url = _source_url(path, page, config)
        return f"{match.group(1)}{url}{qsep}{query}{sep}{rest}{match.group(3)}"

    return re.sub(
        r'((?:href|src)=")' + re.escape(PLACEHOLDER) + r'([^"]*)(")',
        replace,
        html,
    )


def on_env(env, config, files):
    if _broken:
        for line in _broken:
            log.error("broken link to a repository file: %s", line)
        raise PluginError(f"{len(_broken)} broken link(s) to files outside docs/ (listed above)")


def on_post_build(config):
    """The search index as a script too (search/search_index.js): a page opened from disk
    (file://) loads the index that way, as fetch() cannot read files; without it every
    such page fails one request (ERR_FILE_NOT_FOUND). What Material's offline plugin
    writes, without the polyfill it would load from unpkg.com (the site loads nothing
    from other hosts)."""
    index = os.path.join(config.site_dir, "search", "search_index.json")
    if not os.path.isfile(index):
        return
    with open(index, encoding="utf-8") as f:
        data = f.read()
    with open(os.path.join(os.path.dirname(index), "search_index.js"), "w", encoding="utf-8") as f:
        f.write(f"var __index = {data}")
