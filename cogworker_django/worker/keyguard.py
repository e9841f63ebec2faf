"""The key guard: keys of the wrong type are moved aside, never deleted (rule 9).

A key of the wrong type (only a manual write or corruption makes one) breaks every
command on it, deterministically: a queue nobody can push to, a dead set nothing can be
filed in, a registry failing every beat. Every worker process checks, at boot and every
``KEYGUARD_INTERVAL``, the TYPE of every key it knows, in ONE pipeline:

- the fixed keys (:func:`keys.fixed_types`) and today's per-day counters;
- per queue (configured here, and members of ``P:queues``): ``P:queue:<q>`` list and
  ``P:pqueue:<q>`` zset (django.tasks priorities, priority.py), ``P:bell:<q>`` list
  (its doorbell, store/bell.py);
- per process (members of ``P:processes``): ``P:process:<id>`` and ``P:work:<id>``
  hashes; per ``P:inprogress_ids`` member: ``P:inprogress:<id>`` list (one per home);
- with a home per queue (keys.py), each known queue's home's own sets
  (:func:`keys.home_types`);
- per periodic entry (fields of ``P:periodic:schedule``): ``last_slot`` and ``running``
  strings;
- per batch (the :data:`GUARDED_BATCHES` most recently active members of ``P:batches``):
  the batch hash, its pending and waiting sets, failed and results hashes, jids list.

A wrong one is renamed by lua/keyguard_quarantine.lua (type re-checked atomically with
the move) to ``P:quarantine:<key>:<ms>:<rand>`` with a 30-day TTL, one error line names
the key and both types, and only the newest :data:`MAX_COPIES` copies of that key are
kept. Everything then carries on with a fresh key of the right type.

For the admin: :func:`quarantined`, :func:`preview`, :func:`delete`.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable

import redis

from .. import conf
from ..observe import stats
from ..store import codec, connection, errors, homes, keys, runtime, scripts

log = logging.getLogger("cogworker_django")

COMPONENT = "Key guard"
# Long enough for a human to notice and look; the copy is never needed by the system.
QUARANTINE_TTL = 30 * 86400
# Something that keeps writing the wrong type would otherwise leave a copy every check.
MAX_COPIES = 5
SCAN_COUNT = 1000
# The most recently active batches whose keys each check covers (six keys a batch).
GUARDED_BATCHES = 500

SIZE_COMMANDS = {
    "string": "STRLEN",
    "list": "LLEN",
    "set": "SCARD",
    "zset": "ZCARD",
    "hash": "HLEN",
    "stream": "XLEN",
}
COPY_SUFFIX = re.compile(r"^(\d+):([0-9a-f]{8})$")


display = codec.shown


def _per_queue(name: str) -> dict[str, str]:
    return {keys.queue(name): "list", keys.priority_queue(name): "zset", keys.bell(name): "list"}


# Checking ----------------------------------------------------------------------------------


def _registries(conn: redis.Redis) -> list[list[str]]:
    """The registries the keys to guard are read from, in one pipeline: the queues, the
    processes, the in-progress owners, the periodic claimers and entries, the batches,
    the live queues. One of the wrong type lists nothing this round."""
    pipe = conn.pipeline(transaction=False)
    pipe.smembers(keys.queues())
    pipe.smembers(keys.processes())
    pipe.smembers(keys.inprogress_ids())
    pipe.smembers(keys.periodic_claimers())
    pipe.hkeys(keys.periodic_schedule())
    pipe.zrevrange(keys.batches(), 0, GUARDED_BATCHES - 1)
    pipe.zrange(keys.live_queues(), 0, -1)
    listed = []
    for result in pipe.execute(raise_on_error=False):
        if isinstance(result, Exception):
            if errors.is_unavailable(result):
                raise result
            result = ()
        listed.append(sorted(display(m) for m in result))
    return listed


def expected_types(conn: redis.Redis, queues: Iterable[str] = ()) -> dict[str, str]:
    """Key -> type for every key this process knows of. Registries are read in one
    pipeline; one of the wrong type lists nothing this round (it is quarantined by this
    check, and listed again once the heartbeats refill it)."""
    types = dict(keys.fixed_types())
    day = stats.today()
    for name in ("processed", "failed"):
        types[keys.stat(name, day)] = "string"
    queue_names, process_ids, inprogress_ids, claimers, entries, batch_ids, live = _registries(conn)
    every = list(dict.fromkeys([*queues, *queue_names]))
    for name in every:
        types.update(_per_queue(name))
    # Every queue's home and the prefix's own (homes.all_homes walks the same ones).
    home_list = list(
        dict.fromkeys([h for h, _ in homes.group_by_home([*every, *live])] + [keys.root()])
    )
    for home in home_list:
        types.update(homes.Home(home).key_types())
    for ident in process_ids:
        types[keys.process(ident)] = "hash"
        types[keys.work(ident)] = "hash"
    for ident in inprogress_ids:
        for home in home_list:
            types[keys.inprogress(ident, home)] = "list"
    for ident in claimers:
        types[keys.periodic_claims(ident)] = "hash"
    for entry in entries:
        types[keys.periodic_last_slot(entry)] = "string"
        types[keys.periodic_running(entry)] = "string"
    for bid in batch_ids:
        types.update(keys.batch_keys(bid))
    for name in conf.get().LIMITS:
        types.update(keys.limit_keys(name))
    return types


def check(conn: redis.Redis | None = None, queues: Iterable[str] | None = None) -> list[str]:
    """One pass: TYPE of every expected key in one pipeline; quarantine the wrong ones.
    ``queues`` defaults to the configured ones. Returns the keys moved. Raises on an
    outage (the poller reports it once)."""
    conn = conn or connection.get_client()
    expected = expected_types(conn, conf.get().queue_names if queues is None else queues)
    names = list(expected)
    pipe = conn.pipeline(transaction=False)
    for key in names:
        pipe.type(key)
    moved = []
    for key, actual in zip(names, pipe.execute(), strict=True):
        actual = display(actual)
        if actual in ("none", expected[key]):
            continue
        try:
            if quarantine(conn, key, expected[key]):
                moved.append(key)
        except Exception as exc:  # noqa: BLE001 - rule 6: one key never stops the others
            if errors.is_unavailable(exc):
                raise
            log.error("Key guard: could not move %s aside: %s", key, errors.describe(exc))
    return moved


def quarantine(conn: redis.Redis, key: str, expected: str) -> str | None:
    """Move ``key`` aside if it still holds something other than ``expected``; returns
    the copy's name, or None if the key was fine (or gone) by then."""
    # Milliseconds sort copies by age (so pruning keeps the newest); the random part
    # keeps two moves in the same millisecond (two processes) from overwriting each
    # other's copy.
    target = keys.quarantine(key, _stamp(), secrets.token_hex(4))
    actual = scripts.run("keyguard_quarantine", conn, [key, target], [expected, QUARANTINE_TTL])
    if not actual:
        return None
    log.error(
        "Key guard: %s held a %s, not a %s: moved to %s (kept %d days)",
        key,
        display(actual),
        expected,
        target,
        QUARANTINE_TTL // 86400,
    )
    errors.best_effort(COMPONENT, lambda: prune(conn, key), f"pruning copies of {key}")
    return target


class _Stamps:
    """The last stamp given in this process (on its runtime, store/runtime.py)."""

    last = 0


_stamp_lock = threading.Lock()


def _stamp() -> int:
    """Epoch milliseconds, strictly increasing within this process: two copies moved in
    one millisecond still sort by age."""
    stamps = runtime.current().of(_Stamps)
    with _stamp_lock:
        stamps.last = max(int(time.time() * 1000), stamps.last + 1)
        return stamps.last


glob_escape = keys.glob_escape


def copies(conn: redis.Redis, key: str) -> list[tuple[int, str]]:
    """(moved_at ms, name) of every quarantined copy of exactly ``key``, newest first
    (a SCAN, made only when a key was just moved, or by the admin)."""
    prefix = keys.quarantine_prefix(key)
    found = []
    for name in conn.scan_iter(match=glob_escape(prefix) + "*", count=SCAN_COUNT):
        name = display(name)
        # This key's copies only, not those of "<key>:<more>".
        m = COPY_SUFFIX.match(name[len(prefix) :])
        if m:
            found.append((int(m.group(1)), name))
    return sorted(found, reverse=True)


def prune(conn: redis.Redis, key: str) -> int:
    """Delete all but the newest MAX_COPIES copies of ``key``; returns how many went."""
    stale = [name for _ms, name in copies(conn, key)[MAX_COPIES:]]
    if stale:
        conn.delete(*stale)
    return len(stale)


def timer(queues: Iterable[str]) -> Callable[[redis.Redis], list[str]]:
    """The poller timer function for this process's queues."""
    names = list(queues)
    return lambda conn: check(conn, names)


def scan_copies(conn: redis.Redis) -> Iterable[str]:
    """The name of every quarantined copy of this prefix (SCAN on every master)."""
    for pattern in keys.quarantine_patterns():
        for name in conn.scan_iter(match=pattern, count=SCAN_COUNT):
            name = display(name)
            if parse_copy(name):
                yield name


def parse_copy(name: str) -> tuple[str, int] | None:
    """(original key, moved_at ms) of a quarantine copy's name, or None for any other."""
    if not keys.is_quarantined(name):
        return None
    root = keys.quarantine_root(keys.home_part(name))
    original, sep, suffix = name[len(root) :].rpartition(":")
    original, sep2, ms = original.rpartition(":")
    if not sep or not sep2 or not original or not COPY_SUFFIX.match(f"{ms}:{suffix}"):
        return None
    return original, int(ms)


__all__ = [
    "check",
    "copies",
    "expected_types",
    "parse_copy",
    "prune",
    "quarantine",
    "scan_copies",
    "timer",
]
