"""Filing ``P:unsettled``: jobs a stopping process ran but could not file in retry, dead
or the schedule. Any live process's poller files them; they never run again.

Each entry is filed by lua/file_unsettled.lua, which adds the job to its set before it
removes the entry, and only while the entry is still listed, so two processes never
file one twice. One entry never holds up the others (rule 6): an entry that can't be
read, or that Redis refuses to file where it says (a score it won't take, a set of the
wrong type), is buried in dead with its bytes and the reason; one that can't be filed
even there stays listed for the next pass, behind nothing.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

from ..core import payload
from ..store import errors, homes, keys, scripts
from .failures import on_dead_placement
from .fetch import text, wire
from .ledger import Filing

log = logging.getLogger("cogworker_django")

BATCH = 100
TARGETS = ("retry", "dead", "schedule")


def file_unsettled(conn: Any) -> int:
    """One pass over the first BATCH entries of every home; returns how many were filed.
    Raises only when Redis is unavailable (the poller retries next pass)."""
    return sum(_file_home(conn, home) for home in homes.all_homes(conn))


def _file_home(conn: Any, home: str) -> int:
    filed = 0
    for listed in conn.lrange(keys.unsettled(home), 0, BATCH - 1):
        entry = text(listed)
        try:
            filing = read_entry(entry)
        except (ValueError, KeyError, TypeError) as exc:
            # An entry we can't read is still a job: bury it in dead with its bytes.
            filed += _bury(conn, home, entry, "InvalidUnsettledEntry", errors.safe_str(exc))
            continue
        try:
            filed += _file(conn, home, entry, filing)
        except Exception as exc:  # noqa: BLE001 - one entry never stops the others
            if errors.is_unavailable(exc):
                raise
            filed += _bury(
                conn,
                home,
                entry,
                "UnfileableUnsettledEntry",
                f"Redis refused to file it in {filing.target}: {errors.describe(exc)}",
            )
    return filed


def read_entry(entry: str) -> Filing:
    data = json.loads(wire(entry))
    on_dead = data.get("on_dead")
    if on_dead is not None:
        if not (isinstance(on_dead, list) and len(on_dead) == 3):
            raise ValueError(f"on_dead {on_dead!r} is not [payload, score, queue]")
        on_dead = tuple(str(part) for part in on_dead)
    filing = Filing(data["target"], float(data["score"]), data["payload"], on_dead)
    if filing.target not in TARGETS:
        raise ValueError(f"unknown target {filing.target!r}")
    if not math.isfinite(filing.score):
        raise ValueError(f"score {data['score']!r} is not a finite number")
    if not isinstance(filing.payload, str):
        raise TypeError("payload is not a string")
    return filing


def _file(conn: Any, home: str, entry: str, filing: Filing) -> int:
    """Into ``home``'s set: the entry was written to the list of the home the job was
    fetched from, and one script files it (one slot)."""
    target = {"retry": keys.retry, "dead": keys.dead, "schedule": keys.schedule}
    script_keys = [keys.unsettled(home), target[filing.target](home)]
    args: list[Any] = [wire(entry), repr(filing.score), filing.payload]
    if filing.on_dead is not None and filing.target == "dead":
        more_keys, more_args = on_dead_placement(filing.on_dead, home)
        script_keys += more_keys
        args += more_args
    return int(scripts.run("file_unsettled", conn, script_keys, args))


def _bury(conn: Any, home: str, entry: str, error_class: str, reason: str) -> int:
    wrapper = payload.unparseable(wire(entry), None, error_class, reason)
    try:
        done = _file(conn, home, entry, Filing("dead", time.time(), payload.encode(wrapper)))
    except Exception as exc:  # noqa: BLE001 - left listed; the others go on
        if errors.is_unavailable(exc):
            raise
        log.error(
            "an entry of %s can't be filed even in dead (%s): left listed",
            keys.unsettled(home),
            errors.describe(exc),
        )
        return 0
    if done:
        log.error("an entry of %s was filed in dead: %s", keys.unsettled(home), reason)
    return done
