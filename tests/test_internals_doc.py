"""docs/internals.md stays the key to the code: every "rule N" cited in the package has a
heading there, and every Lua script is described in its data-model section."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cogworker_django"
INTERNALS = ROOT / "docs" / "internals.md"

# "rule 4", "Rule 13", "rules 5 and 12", "rules 2, 3", and a citation broken over two
# comment lines ("rule\n-- 2", "Rule\n  1").
CITATION = re.compile(r"\brules?(?:\s|#|--)+(\d+(?:(?:\s|,|and|&)+\d+)*)\b", re.IGNORECASE)
HEADING = re.compile(r"^### Rule (\d+): \S", re.MULTILINE)


def _doc() -> str:
    return INTERNALS.read_text(encoding="utf-8")


def _cited() -> dict[int, list[str]]:
    """Rule number -> where it is cited (path:line) in the package's source."""
    cited: dict[int, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".lua", ".html", ".txt") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for match in CITATION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            for number in re.findall(r"\d+", match.group(1)):
                where = f"{path.relative_to(ROOT)}:{line}"
                cited.setdefault(int(number), []).append(where)
    return cited


def test_the_scan_finds_the_citations() -> None:
    # Guards the test itself: a pattern that matched nothing would pass vacuously.
    cited = _cited()
    assert len(cited) >= 10
    assert any(w.startswith("cogworker_django/store/lua/") for ws in cited.values() for w in ws)


def test_every_cited_rule_has_a_heading_in_internals_md() -> None:
    headings = {int(n) for n in HEADING.findall(_doc())}
    missing = {n: where for n, where in _cited().items() if n not in headings}
    assert not missing, (
        "rules cited in the code without a '### Rule N: ...' heading in docs/internals.md: "
        f"{missing}"
    )


def test_the_rules_are_numbered_once_and_in_order() -> None:
    numbers = [int(n) for n in HEADING.findall(_doc())]
    assert numbers == list(range(1, len(numbers) + 1)), numbers


def test_every_lua_script_is_in_the_data_model_section() -> None:
    doc = _doc()
    start = doc.index("\n## Redis data model")
    end = doc.find("\n## ", start + 1)
    section = doc[start : end if end != -1 else len(doc)]
    scripts = sorted(p.name for p in (PACKAGE / "store" / "lua").glob("*.lua"))
    assert scripts
    missing = [name for name in scripts if name not in section]
    assert not missing, f"Lua scripts not described in docs/internals.md's data model: {missing}"
