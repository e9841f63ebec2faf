"""Running tests against a Redis Cluster as well as a single Redis (docs/cluster.md).

A test or module marked ``@pytest.mark.cluster`` runs twice, ``[single]`` and
``[cluster]``: conftest parametrizes its ``redis_mode`` and every fixture built on it
(``prefix``, ``cogworker_settings``, ``r``, ``worker``) follows. In cluster mode the
prefix is a hash tag (``{t0123456789}``), so a test that spells a key as
``f"{prefix}:queue:default"`` names the same key the package builds (keys.root). The
cluster is 3 masters started once per session by ``scripts/cluster`` (conftest's
``local_cluster``); without
``redis-server`` the cluster half skips, saying so.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from .helpers import CLUSTER_PORT_SPAN, CLUSTER_PORTS, ROOT, xdist_index

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
        # From this test process's block (helpers.free_port says why); the script takes
        # the first free ones from there up.
        base = CLUSTER_PORTS + (xdist_index() % 8) * CLUSTER_PORT_SPAN
        out = _run_script(
            "start", "--masters", str(masters), "--replicas", str(replicas),
            "--base-port", str(base), timeout=120,
        )  # fmt: skip
        lines = out.splitlines()
        fields = dict(line.split("=", 1) for line in lines if "=" in line)
        nodes: dict[int, str] = {}
        for line in lines:
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                nodes[int(parts[0])] = parts[1]
        return cls(Path(fields["dir"]), fields["url"], nodes)

    def restart(self, port: int) -> None:
        """Start again a node that was killed (its data is gone: nothing on disk)."""
        _run_script("restart", "--dir", str(self.dir), "--port", str(port), timeout=60)

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop", "--dir", str(self.dir)], timeout=60, check=False)

    def client(self, **kwargs) -> RedisCluster:
        return client(self.url, **kwargs)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(
            port=port, socket_timeout=5, socket_connect_timeout=1, decode_responses=True
        )


def _run_script(command: str, *args: str, timeout: float) -> str:
    """Run scripts/cluster COMMAND ARGS; its stdout, or an error carrying all it printed."""
    done = subprocess.run(
        [str(SCRIPT), command, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/cluster {command} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def client(url: str, **kwargs) -> RedisCluster:
    """A plain cluster client (the tests' own, not the package's)."""
    return RedisCluster.from_url(url, socket_timeout=10, socket_connect_timeout=2, **kwargs)
