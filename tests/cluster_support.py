"""Running tests against a Redis Cluster as well as a single Redis (docs/cluster.md).

A test or module marked ``@pytest.mark.cluster`` runs twice, ``[single]`` and
``[cluster]``: conftest parametrizes its ``redis_mode`` and every fixture built on it
(``prefix``, ``cogworker_settings``, ``r``, ``worker``) follows. In cluster mode the
prefix is a hash tag (``{t0123456789}``), so a test that spells a key as
``f"{prefix}:queue:default"`` names the same key the package builds (keys.root). The
cluster is 3 masters started once per session by ``scripts/cluster``; without
``redis-server`` the cluster half skips, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from .helpers import ROOT

SCRIPT = ROOT / "scripts" / "cluster"
MODES = ("single", "cluster")


@dataclass
class LocalCluster:
    """A cluster started by scripts/cluster: its directory, nodes and a URL."""

    dir: Path
    url: str
    nodes: dict[int, str] = field(default_factory=dict)  # port -> "master" / "replica"

    @classmethod
    def start(cls, masters: int = 3, replicas: int = 0) -> LocalCluster:
        if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
            pytest.skip("redis-server / redis-cli not installed: no local Redis Cluster")
        done = subprocess.run(
            [str(SCRIPT), "start", "--masters", str(masters), "--replicas", str(replicas)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"scripts/cluster start failed:\n{done.stdout}{done.stderr}")
        lines = done.stdout.splitlines()
        fields = dict(line.split("=", 1) for line in lines if "=" in line)
        nodes: dict[int, str] = {}
        for line in lines:
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                nodes[int(parts[0])] = parts[1]
        return cls(Path(fields["dir"]), fields["url"], nodes)

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop", "--dir", str(self.dir)], timeout=60, check=False)

    def client(self, **kwargs) -> RedisCluster:
        return RedisCluster.from_url(
            self.url, socket_timeout=10, socket_connect_timeout=2, **kwargs
        )

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(
            port=port, socket_timeout=5, socket_connect_timeout=1, decode_responses=True
        )


_session: LocalCluster | None = None


def session_cluster() -> LocalCluster:
    """The session's cluster, started on first use (stopped by :func:`stop_session`)."""
    global _session
    if _session is None:
        _session = LocalCluster.start()
    return _session


def stop_session() -> None:
    global _session
    if _session is not None and os.getpid() == _owner_pid:
        _session.stop()
    _session = None


_owner_pid = os.getpid()


def delete_prefix(client, root: str) -> None:
    """Every key under ``root`` (on every master: the cluster client's SCAN walks them)."""
    found = list(client.scan_iter(match=f"{_glob_escape(root)}:*", count=1000))
    for start in range(0, len(found), 500):
        client.delete(*found[start : start + 500])


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
