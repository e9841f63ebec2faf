"""``Quarantine``: keys of the wrong type the key guard (``cogworker_django.worker.keyguard``)
moved aside: listed, previewed within bounds, deleted."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import redis

from ..store import connection, keys
from ..worker import keyguard
from ._util import as_datetime, epoch, text

# Bounds on what preview() reads and returns, whatever the size of the copy.
PREVIEW_ITEMS = 20
PREVIEW_ITEM_CHARS = 300
PREVIEW_CHARS = 4000


@dataclass(frozen=True)
class QuarantinedKey:
    data: dict[str, Any] = field(repr=False)

    key = property(lambda self: text(self.data.get("key")))
    original_key = property(lambda self: text(self.data.get("original_key")))
    type = property(lambda self: text(self.data.get("type")))

    @property
    def size(self) -> int | None:
        value = self.data.get("size")
        return value if isinstance(value, int) else None

    @property
    def ttl(self) -> int | None:
        value = self.data.get("ttl")
        return value if isinstance(value, int) else None

    @property
    def moved_at(self) -> dt.datetime | None:
        ms = epoch(self.data.get("moved_at"))  # epoch milliseconds
        return as_datetime(ms / 1000.0) if ms is not None else None


class Quarantine:
    def list(self, start: int = 0, count: int = 50) -> list[QuarantinedKey]:
        return [QuarantinedKey(dict(r)) for r in quarantined(start=start, count=count)]

    def preview(self, key: str) -> str:
        return text(preview(key))

    def delete(self, key: str) -> Any:
        return delete(key)

    def count(self) -> int:
        return count()


# Reading and deleting copies ---------------------------------------------------------


def quarantined(
    start: int = 0, count: int = 50, *, conn: redis.Redis | None = None
) -> list[dict[str, Any]]:
    """Quarantined copies, newest first: key, original_key, type, size, moved_at (epoch
    ms), ttl (seconds). Found by SCAN over this prefix's keyspace."""
    conn = conn or connection.get_client()
    found = []
    for name in keyguard.scan_copies(conn):
        parsed = keyguard.parse_copy(name)
        if parsed:
            found.append((parsed[1], name, parsed[0]))
    page = sorted(found, reverse=True)[start : start + count]
    if not page:
        return []
    pipe = conn.pipeline(transaction=False)
    for _ms, name, _orig in page:
        pipe.type(name)
        pipe.ttl(name)
    meta = pipe.execute()
    types = [keyguard.display(t) for t in meta[0::2]]
    pipe = conn.pipeline(transaction=False)
    for (_ms, name, _orig), kind in zip(page, types, strict=True):
        pipe.execute_command(keyguard.SIZE_COMMANDS.get(kind, "EXISTS"), name)
    sizes = pipe.execute(raise_on_error=False)
    return [
        {
            "key": name,
            "original_key": original,
            "type": kind,
            "size": size if isinstance(size, int) else None,
            "moved_at": ms,
            "ttl": ttl,
        }
        for (ms, name, original), kind, ttl, size in zip(
            page, types, meta[1::2], sizes, strict=True
        )
    ]


def count(*, conn: redis.Redis | None = None) -> int:
    """How many quarantined copies there are (a SCAN over this prefix's keyspace, as
    :func:`quarantined`: its round trips grow with the keyspace, so callers that poll
    cache it)."""
    conn = conn or connection.get_client()
    return sum(1 for _ in keyguard.scan_copies(conn))


def _require_copy(key: str) -> None:
    if keyguard.parse_copy(key) is None:
        raise ValueError(
            f"{key!r} is not a quarantined copy (names start with {keys.quarantine_root(keys.home_part(key))!r})"
        )


def _clip(value: Any) -> str:
    text = keyguard.display(value)
    return text if len(text) <= PREVIEW_ITEM_CHARS else text[:PREVIEW_ITEM_CHARS] + "..."


def preview(key: str, *, conn: redis.Redis | None = None) -> str:
    """A bounded text rendering of a quarantined copy (first PREVIEW_ITEMS items, each
    cut at PREVIEW_ITEM_CHARS, all within PREVIEW_CHARS). ValueError for other keys."""
    _require_copy(key)
    return _preview(key, conn or connection.get_client())


# conn: Any, as connection.get_client returns (redis-py's replies are sync/async unions).
def _preview(key: str, conn: Any) -> str:
    kind = keyguard.display(conn.type(key))
    n = PREVIEW_ITEMS
    if kind == "none":
        return "(gone: expired or deleted)"
    if kind == "string":
        lines = [keyguard.display(conn.getrange(key, 0, PREVIEW_CHARS))]
    elif kind == "list":
        lines = [_clip(v) for v in conn.lrange(key, 0, n - 1)]
    elif kind == "set":
        lines = [_clip(v) for v in conn.sscan(key, 0, count=n)[1][:n]]
    elif kind == "zset":
        lines = [f"{s!r}  {_clip(v)}" for v, s in conn.zrange(key, 0, n - 1, withscores=True)]
    elif kind == "hash":
        lines = [
            f"{_clip(f)}: {_clip(v)}" for f, v in list(conn.hscan(key, 0, count=n)[1].items())[:n]
        ]
    elif kind == "stream":
        lines = [
            f"{keyguard.display(i)} "
            + " ".join(f"{keyguard.display(f)}={_clip(v)}" for f, v in fields.items())
            for i, fields in conn.xrange(key, count=n)
        ]
    else:
        lines = [f"(a {kind}: no preview)"]
    size = (
        conn.execute_command(keyguard.SIZE_COMMANDS[kind], key)
        if kind in keyguard.SIZE_COMMANDS
        else None
    )
    head = f"{kind}" + (f", size {size}" if size is not None else "")
    text = "\n".join([head, *lines])
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "\n..."


def delete(key: str, *, conn: redis.Redis | None = None) -> bool:
    """Delete a quarantined copy (True if it existed). ValueError for any other key."""
    _require_copy(key)
    return bool((conn or connection.get_client()).delete(key))
