"""scripts/cluster: starts a local Redis Cluster on free ports, reports it, tears it down;
and refuses clearly what it can't do (docs/cluster.md#a-local-cluster)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from ..cluster_support import SCRIPT, LocalCluster


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_start_status_and_stop(tmp_path):
    where = tmp_path / "nodes"
    done = run("start", "--dir", str(where))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"dir={where}"
    nodes = [line.split() for line in lines[1:-1]]
    assert [role for _port, role in nodes] == ["master"] * 3
    assert lines[-1] == f"url=redis://127.0.0.1:{nodes[0][0]}/0"
    pids = [int((where / port / "redis.pid").read_text()) for port, _ in nodes]
    try:
        info = redis.Redis(port=int(nodes[0][0])).execute_command("CLUSTER INFO")
        assert info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == 3
        status = run("status", "--dir", str(where))
        assert sorted(status.stdout.split("\n")[:-1]) == sorted(
            f"{port} master ok" for port, _ in nodes
        )
    finally:
        stopped = run("stop", "--dir", str(where))
    assert stopped.returncode == 0, stopped.stderr
    assert not where.exists()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or "Z" in _state(pid)


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_fewer_than_three_masters_is_refused(tmp_path):
    done = run("start", "--masters", "2", "--dir", str(tmp_path / "n"))
    assert done.returncode == 1
    assert "at least 3 masters" in done.stderr


def test_without_redis_server_the_script_fails_and_the_cluster_tests_skip(monkeypatch, tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    done = run("start", env=env)
    assert done.returncode == 1 and "redis-server is not installed" in done.stderr
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="redis-server / redis-cli not installed"):
        LocalCluster.start()
