"""Bounded search over a sorted set with ZSCAN MATCH.

A search never loads the set: each page issues at most ``budget`` ZSCAN calls (each
examining about ``SCAN_COUNT`` entries, the matching done by Redis) and returns a cursor
to continue from. With hundreds of thousands of entries a page stays one short burst
of round trips; the operator pages on through the rest.

The term is matched inside the payload's JSON text, case-insensitively for ASCII
letters: a job name, a jid, a queue, an argument or error text all match.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .records import JobRecord

# Entries Redis examines per ZSCAN call (a hint: small sets answer in one call).
SCAN_COUNT = 1000
# ZSCAN calls per search page: about 20,000 entries examined per page.
SEARCH_BUDGET = 20
# A find by jid examines up to FIND_SCAN_COUNT * FIND_BUDGET = 300,000 entries before
# giving up (measured: about 1.3 s to miss on a 200,000-entry set on the 2-core test
# machine; the dead set is capped at DEAD_MAX_JOBS, 10,000 by default).
FIND_SCAN_COUNT = 10_000
FIND_BUDGET = 30

_GLOB_SPECIAL = set("*?[]\\^")


@dataclass
class SearchPage:
    records: list[JobRecord] = field(default_factory=list)
    cursor: int = 0  # 0: the whole set was searched
    calls: int = 0

    @property
    def complete(self) -> bool:
        return self.cursor == 0


def json_fragment(term: str) -> str:
    """``term`` as it appears inside a JSON string of the payload."""
    return json.dumps(term, ensure_ascii=False)[1:-1]


def glob_literal(fragment: str, nocase: bool = True) -> str:
    """A Redis glob matching ``fragment`` literally (ASCII letters either case)."""
    out = []
    for ch in fragment:
        if nocase and ch.isascii() and ch.isalpha():
            out.append(f"[{ch.lower()}{ch.upper()}]")
        elif ch in _GLOB_SPECIAL:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def contains_pattern(term: str) -> str:
    return f"*{glob_literal(json_fragment(term))}*"


def jid_pattern(jid: str) -> str:
    return f'*"jid":"{glob_literal(json_fragment(jid), nocase=False)}"*'


def scan(
    conn: Any,  # a redis.Redis; Any as connection.get_client returns (its reply unions)
    key: str,
    pattern: str,
    source: str,
    *,
    cursor: int = 0,
    want: int = 25,
    budget: int = SEARCH_BUDGET,
    scan_count: int = SCAN_COUNT,
) -> SearchPage:
    """Up to about ``want`` matches, at most ``budget`` ZSCAN calls, from ``cursor``."""
    page = SearchPage(cursor=cursor)
    seen: set[bytes] = set()
    while page.calls < budget:
        page.cursor, items = conn.zscan(key, page.cursor, match=pattern, count=scan_count)
        page.calls += 1
        for raw, score in items:
            if raw not in seen:  # ZSCAN may return an entry twice
                seen.add(raw)
                page.records.append(JobRecord.from_raw(raw, float(score), source))
        if page.cursor == 0 or len(page.records) >= want:
            break
    return page
