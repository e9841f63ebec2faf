"""The in-progress lists of the identity a process had before it was fenced.

A process taken for dead while it was stalled (recovery.py) and back finds out at its
next beat (heartbeat.py). Its runs of the jobs recovered meanwhile are fenced
(ledger.py), and it carries on under a new identity (launcher.py), so that nothing a late
recoverer of the old identity still does (moving its lists, freeing its leases, pushing
its claimed periodic slots) can touch what the process does from then on.

The jobs it fetched between its return and that beat are on the old identity's lists.
They stay there until each is settled (acked, filed, given or handed back) from the list
it is on: never moved to the new lists, since a move could cross an ack sent to the other
list and leave a settled job listed, to be run again. Which list a job is on is known
exactly: every job listed when the retirement began, and every job a fetch brought into
an old list after (a fetch sent just before the swap of names).

Until those lists are empty and no fetch sent before the swap is still out, the old
identity stays registered and beaten as this process's own (fetch.py's ``beat``), so a
death meanwhile leaves its lists to recovery as any dead process's. (A process fenced
again before then retires its lists of both identities together.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Retired:
    # The in-progress lists of the identities the process had: name -> (identity, home).
    lists: dict[str, tuple[str, str]]
    out: frozenset[int]  # the fetches out at the swap: each may still add to a list
    # Raw payload -> the old list it is on, until settled.
    on: dict[str, str] = field(default_factory=dict)

    @property
    def identities(self) -> list[str]:
        return sorted({identity for identity, _home in self.lists.values()})

    def homes_of(self, identity: str) -> list[str]:
        """The homes ``identity`` has a list in."""
        return [home for i, home in self.lists.values() if i == identity]

    def took(self, raws: Iterable[str], listed: str) -> None:
        """``raws`` are on the old list ``listed``."""
        for raw in raws:
            self.on[raw] = listed

    def where(self, raw: str) -> tuple[str, str] | None:
        """(old list, home) when ``raw`` is on an old list, else None."""
        listed = self.on.get(raw)
        return None if listed is None else (listed, self.lists[listed][1])

    def settled(self, raws: Iterable[str]) -> None:
        for raw in raws:
            self.on.pop(raw, None)

    def over(self, conn: Any, out_now: frozenset[int]) -> bool:
        """Whether nothing is left on the old lists, nor can be: every fetch sent before
        the swap is back, and every old list is empty."""
        if self.out & out_now:
            return False
        pipe = conn.pipeline(transaction=False)
        for name in self.lists:
            pipe.llen(name)
        return not any(pipe.execute())


__all__ = ["Retired"]
