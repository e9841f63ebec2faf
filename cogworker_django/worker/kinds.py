"""What a reliable fetch takes by kind (lua/fetch.lua): async jobs only for the event
loop's free slots, plain ones only for free threads (docs/workers.md "Plain and async
jobs side by side"). Shared by the fetch (worker/fetch.py) and the dispatcher
(worker/dispatch.py), which asks for each kind."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from .ledger import Work


class Kinds(NamedTuple):
    """What a fetch may take by kind (lua/fetch.lua): at most ``async_room`` async jobs
    (those whose path is in ``paths``: :func:`joined_paths`), the rest of its count
    plain."""

    async_room: int
    paths: str
    # Plain jobs that may be taken beyond the threads' room, to reach an async job
    # behind them on the same queue (they wait in the process for a thread).
    spare: int = 0

    def after(self, works: list[Work]) -> Kinds:
        """The async room left once ``works`` are taken (the script's own reading of a
        payload's ``func``)."""
        paths = self.paths
        taken = 0
        for work in works:
            found = FUNC.search(work.raw)
            taken += bool(found and f"\n{found.group(1)}\n" in paths)
        return Kinds(max(0, self.async_room - taken), paths, self.spare)


def joined_paths(paths: Iterable[str]) -> str:
    """The async jobs' paths as lua/fetch.lua takes them: one argument, each path between
    newlines (built once: a fetch sends it as it is)."""
    return "\n" + "".join(f"{p}\n" for p in sorted(paths)) if paths else ""


# A payload's job path as lua/fetch.lua reads it.
FUNC = re.compile(r'"func":"([^"]*)"')


class Fetched(list[Work]):
    """The jobs one fetch took; ``blocked`` when it left a queue whose next job is of a
    kind it had no room for (so its being short is no sign the queues ran dry): "a" when
    one such job was an async one, else "p"; "" when it left none."""

    blocked = ""
