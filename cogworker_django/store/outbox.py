"""The outbox: jobs on their way from the prefix's home to a queue's (keys.py, homes.py).

With a home per queue (:func:`keys.spread`) a batch's keys and its members' queues are
in different hash slots, so the script that counts a member (lua/batch_push.lua) or
fires a callback (lua/batch_update.lua) can't push it too. It puts an *envelope* in
``P:outbox`` instead, a list in the prefix's home, in the same step: a member is counted
exactly when its envelope is in the outbox. The envelope (:func:`envelope`) names the
real target key, value and score.

A relay then moves each envelope on, by lua/outbox_relay.lua in the target's home: it
sets the marker ``keys.relayed(id, home)`` (NX, with a TTL) and pushes only if it set
it; then, and only then, the envelope leaves the outbox (rule 2). A crash between the
two leaves the envelope listed; the next relay finds the marker and only removes it.
Markers are kept until they expire, so a second relayer that read the envelope before
its removal still finds its marker: each envelope is pushed exactly once.

The pusher relays its own envelopes at once (:func:`relay`); the poller relays the ones
a pusher left behind when it died in between (:func:`relay_leftovers`). Off spread
nothing here is used: the scripts push into the real keys.

A :class:`Lease` fences a relay that read what it relays at a known time (a pass of the
database outbox, durable/relay.py): the push scripts refuse its pushes once the lease
has run out on Redis's clock (rule 15).
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ..core import payload
from . import bell, errors, keys, listing, scripts
from .codec import raw_text, wire

log = logging.getLogger("cogworker_django")

# Seconds a marker outlives its relay: far longer than any relayer holds an envelope it
# read (a pusher relays at once, the poller within one pass).
MARKER_TTL = 3600
# Entries read per relay_leftovers call (the oldest first).
LEFTOVER_BATCH = 500
# Seconds an envelope waits before the poller takes it for a pusher's leftover.
LEFTOVER_AGE = 60.0

COMPONENT = "Outbox relay"


@dataclass(frozen=True)
class Lease:
    """A relay's right to push what it read: from ``start`` (Redis's clock, read before
    the entries were) for ``seconds``. lua/outbox_relay.lua and lua/batch_push.lua refuse
    a push once it has run out: a relay that stalled that long may have lost what it
    read to another relay, whose markers need to be kept only this long."""

    start: float
    seconds: float


class LeaseExpired(errors.CogworkerError):
    """A push refused because its relay's lease had run out (nothing was pushed)."""


def take_lease(conn: Any, seconds: float) -> Lease:
    """A lease from now on Redis's clock (one round trip: ``TIME``)."""
    now_s, micros = conn.time()
    return Lease(int(now_s) + int(micros) / 1e6, seconds)


def lease_args(lease: Lease | None) -> list[Any]:
    """The two script arguments that stand for ``lease`` (``"", 0``: none)."""
    return ["", 0] if lease is None else [repr(lease.start), lease.seconds]


@dataclass(frozen=True)
class Envelope:
    id: str
    key: str  # the real target: a queue list, a priority zset or a schedule
    value: str
    score: str  # "" for a list (LPUSH), else the zset score
    queue: str
    at: float  # when it was put in the outbox (epoch seconds)

    @property
    def home(self) -> str:
        return keys.home_part(self.key)


def envelope(key: str, value: str, score: str, queue: str) -> str:
    """The outbox entry that stands for pushing ``value`` into ``key`` (compact JSON)."""
    return json.dumps(
        {
            "id": uuid.uuid4().hex,
            "key": key,
            "value": value,
            "score": score,
            "queue": queue,
            "at": time.time(),
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def read(raw: str) -> Envelope:
    """The envelope ``raw`` holds; ValueError, KeyError or TypeError when it is not one
    (or names a target outside its queue's home: no script could push it there)."""
    raw.encode("utf-8")  # UnicodeEncodeError (a ValueError): bytes that are not text
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise TypeError("not a JSON object")
    found = Envelope(
        data["id"], data["key"], data["value"], data["score"], data["queue"], data["at"]
    )
    for name in ("id", "key", "value", "score", "queue"):
        if not isinstance(getattr(found, name), str):
            raise TypeError(f"{name} is not a string")
    if not found.id or not found.queue:
        raise ValueError("no id or no queue")
    if isinstance(found.at, bool) or not isinstance(found.at, int | float):
        raise TypeError("at is not a number")
    if not math.isfinite(found.at):
        raise ValueError("at is not a finite number")
    if found.score != "" and not math.isfinite(float(found.score)):
        raise ValueError(f"score {found.score!r} is not a finite number")
    if found.home != keys.home_of(found.queue):
        raise ValueError(f"target {found.key!r} is not in the home of queue {found.queue!r}")
    return found


def relay(conn: Any, raws: Sequence[str]) -> int:
    """Relay the envelopes ``raws`` (as listed) a pusher just put in the outbox; returns
    how many were pushed. Never raises: the envelopes are in the outbox, so what is not
    relayed now the poller relays later (an outage is logged once, anything else as an
    error)."""
    if not raws:
        return 0
    try:
        pushed, failures = _relay(conn, [(raw, read(raw)) for raw in raws])
    except Exception as exc:  # noqa: BLE001 - the job is counted and in the outbox
        errors.report(COMPONENT, exc, "left in the outbox for the poller")
        return 0
    if failures:
        errors.report(COMPONENT, failures[0], "left in the outbox for the poller")
    else:
        errors.recovered(COMPONENT)
    return pushed


def relay_present(conn: Any, raws: Sequence[str]) -> int:
    """:func:`relay` for the envelopes of ``raws`` that are in the outbox (a script may
    have listed only some of those it was given: a callback it did not fire)."""
    if not raws:
        return 0
    try:
        pipe = conn.pipeline(transaction=False)
        for raw in raws:
            pipe.lpos(keys.outbox(), raw)
        found = pipe.execute()
    except Exception as exc:  # noqa: BLE001 - the poller relays them later
        errors.report(COMPONENT, exc, "left in the outbox for the poller")
        return 0
    return relay(conn, [raw for raw, at in zip(raws, found, strict=True) if at is not None])


def relay_leftovers(conn: Any, older_than: float = LEFTOVER_AGE) -> int:
    """Relay the oldest envelopes (up to :data:`LEFTOVER_BATCH`) listed for more than
    ``older_than`` seconds: those of a pusher that died before relaying them. An entry
    that is not an envelope is filed in the prefix's dead set with the reason, and
    removed. Returns how many were pushed. Raises when Redis is unavailable, or, after
    relaying all the others, the first deterministic refusal (a target of the wrong
    type: the key guard moves it aside; the entry stays listed), for the caller's
    backoff (rule 5)."""
    if not keys.spread():
        return 0
    cutoff = time.time() - older_than
    due: list[tuple[str, Envelope]] = []
    for listed in reversed(conn.lrange(keys.outbox(), -LEFTOVER_BATCH, -1)):
        raw = raw_text(listed)
        try:
            entry = read(raw)
        except (ValueError, KeyError, TypeError) as exc:
            _bury(conn, raw, errors.safe_str(exc) or type(exc).__name__)
            continue
        if entry.at <= cutoff:
            due.append((raw, entry))
    pushed, failures = _relay(conn, due)
    if failures:
        raise failures[0]
    return pushed


def _relay(conn: Any, entries: list[tuple[str, Envelope]]) -> tuple[int, list[Exception]]:
    """Each entry's script, then (once its push is known done) its removal from the
    outbox and its queue's listing. Raises when Redis is unavailable; returns the pushes
    and the deterministic refusals (those entries stay listed)."""
    if not entries:
        return 0, []
    script = scripts.get("outbox_relay")
    pipe = conn.pipeline(transaction=False)
    for _raw, entry in entries:
        script.pipelined(
            pipe,
            [keys.relayed(entry.id, entry.home), entry.key],
            [entry.value, entry.score, MARKER_TTL, *lease_args(None)],
        )
    replies = scripts.execute(pipe, conn, raise_on_error=False)
    pushed = 0
    failures: list[Exception] = []
    done: list[tuple[str, Envelope]] = []
    for (raw, entry), reply in zip(entries, replies, strict=True):
        if isinstance(reply, Exception):
            if errors.is_unavailable(reply):
                raise reply
            failures.append(_described(conn, entry, reply))
            continue
        pushed += int(reply)
        done.append((raw, entry))
    if done:
        pipe = conn.pipeline(transaction=False)
        for raw, _entry in done:
            pipe.lrem(keys.outbox(), 1, wire(raw))
        queues = sorted({entry.queue for _raw, entry in done})
        listing.add(pipe, *queues)
        removed = pipe.execute(raise_on_error=False)
        for result in removed[:-1]:
            if isinstance(result, Exception):
                raise result  # left listed: the next relay finds the marker
        listing.report(removed[-1], *queues)  # only a listing (rule 4): never raised
        if pushed:  # idle workers start them now
            bell.ring(conn, queues)
    return pushed, failures


def _described(conn: Any, entry: Envelope, exc: Exception) -> Exception:
    """A WRONGTYPE refusal restated with the key, the type it holds and the type it must
    hold (what an operator needs to find it; the key guard moves it aside)."""
    if "WRONGTYPE" not in errors.safe_str(exc):
        return exc
    try:
        held = raw_text(conn.type(entry.key))
    except Exception:  # noqa: BLE001 - the original refusal still says what happened
        return exc
    wanted = "list" if entry.score == "" else "zset"
    return redis.ResponseError(f"WRONGTYPE {entry.key} holds a {held}, not a {wanted}")


def _bury(conn: Any, raw: str, reason: str) -> None:
    """File an entry that is not an envelope in the prefix's dead set, with its bytes,
    removing it from the outbox in the same step (both in the prefix's home; the script
    adds before it removes, and only while the entry is listed)."""
    why = f"an entry of {keys.outbox()} is not an envelope: {reason}"
    wrapper = payload.unparseable(wire(raw), None, "InvalidOutboxEntry", why)
    try:
        done = scripts.run(
            "file_unsettled",
            conn,
            [keys.outbox(), keys.dead(keys.root())],
            [wire(raw), repr(time.time()), payload.encode(wrapper)],
        )
    except Exception as exc:  # noqa: BLE001 - left listed; the others go on (rule 6)
        if errors.is_unavailable(exc):
            raise
        log.error("%s; it can't be filed in dead (%s): left listed", why, errors.describe(exc))
        return
    if done:
        log.error("%s: filed in dead", why)


__all__ = [
    "LEFTOVER_AGE",
    "MARKER_TTL",
    "Envelope",
    "Lease",
    "LeaseExpired",
    "envelope",
    "read",
    "relay",
    "relay_leftovers",
    "relay_present",
    "take_lease",
]
