"""``RedisServer``: what the admin and the checks say about the Redis itself: whether it
keeps anything on disk (RDB snapshots, the append-only file).

A Redis with neither loses everything at a restart: scheduled and retrying jobs, the dead
set, history, counters, unique locks. Queued jobs go too, but those are expected to be
short-lived; the others are what an operator counts on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from ..store import cluster, keys
from ._util import client, text


@dataclass(frozen=True)
class Persistence:
    rdb: bool | None  # a `save` schedule is set (None: unknown, CONFIG refused)
    aof: bool | None  # appendonly yes

    @property
    def none(self) -> bool:
        """True only when both are known to be off."""
        return self.rdb is False and self.aof is False

    @property
    def known(self) -> bool:
        return self.rdb is not None or self.aof is not None


class RedisServer:
    def persistence(self, conn: redis.Redis | None = None) -> Persistence:
        """From ``CONFIG GET save`` and ``appendonly``; where CONFIG is refused (managed
        services, ACLs), ``INFO persistence`` tells whether AOF is on, and RDB stays
        unknown (those services snapshot on their own terms)."""
        conn = conn or client()
        if cluster.is_cluster(conn):  # the master that holds the jobs (one slot)
            conn = cluster.data_node(conn, keys.root())
        try:
            save = conn.config_get("save")
            appendonly = conn.config_get("appendonly")
        except redis.ResponseError:
            try:
                info = conn.info("persistence")
            except redis.ResponseError:
                return Persistence(None, None)
            aof = info.get("aof_enabled")
            return Persistence(None, None if aof is None else bool(int(aof)))
        schedule = text(_value(save, "save")).strip()
        aof = text(_value(appendonly, "appendonly")).strip().lower()
        return Persistence(bool(schedule), aof == "yes" if aof else None)


def _value(reply: dict[Any, Any] | None, name: str) -> Any:
    for key, value in (reply or {}).items():
        if text(key) == name:
            return value
    return None
