"""docs/reliability.md names the tests that back its promises: every test it names
exists, in the file its link points to, and every row of its failure table names one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reliability.md"

# [test_a, test_b](../tests/worker/test_file.py): the names a link cites, and the file
# (under tests/, in the folder of the package part it tests).
LINK = re.compile(r"\[([^\]]*)\]\(\.\./tests/((?:\w+/)?test_\w+\.py)\)")


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _defined(file: str) -> set[str]:
    text = (ROOT / "tests" / file).read_text(encoding="utf-8")
    return set(re.findall(r"^(?:async )?def (test_\w+)", text, re.MULTILINE))


def test_every_test_the_doc_names_exists_in_the_file_it_links():
    cited = [(names, file) for names, file in LINK.findall(_doc())]
    assert len(cited) > 30  # the pattern still finds the doc's links
    missing = []
    for names, file in cited:
        assert (ROOT / "tests" / file).exists(), file
        defined = _defined(file)
        for name in re.findall(r"test_\w+", names):
            if name.removesuffix(".py") != file.removesuffix(".py") and name not in defined:
                missing.append(f"{name} in {file}")
    assert missing == []


def test_every_row_of_the_failure_table_names_a_test_or_says_it_is_no_promise():
    table = _doc().split("## Failure matrix", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) >= 15
    bare = [
        row[:80]
        for row in rows[1:]  # the header
        if not LINK.search(row) and "not a promise" not in row and "(none" not in row
    ]
    assert bare == []
