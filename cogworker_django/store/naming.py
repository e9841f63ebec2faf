"""The client name every Redis connection of a worker process carries (``CLIENT SETNAME``).

Orphan recovery's lifeline (worker/recovery.py) looks for a process's name in ``CLIENT
LIST``: the kernel closes a killed process's sockets at once, so a process whose beat is
late and that has no connection left on the server is gone, while a stalled one keeps
its connections. The name is the process's identity (:func:`client_name`) and is set on
every connection the process opens from then on: redis-py sends ``CLIENT SETNAME`` as it
connects when its pool's ``client_name`` is set.

Where the server refuses ``CLIENT SETNAME`` (twemproxy and other proxies that speak a
subset of the protocol) a named connection could not even connect, so the name is tried
once on a connection of its own first: refused, no connection is named, the heartbeat
announces no name, and the process is judged by ``ORPHAN_THRESHOLD`` alone.
``COGWORKER["CLIENT_NAMES"] = False`` turns naming off outright (a proxy that accepts the
command but does not pass it on, as Envoy's Redis proxy: the names would never show).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from .. import conf
from . import cluster, errors, runtime

log = logging.getLogger("cogworker_django")


class _Named:
    """The name given to this process's connections ("" while none), and the pid that
    set it (a forked child starts unnamed: it has an identity of its own). The runtime's
    (store/runtime.py)."""

    def __init__(self) -> None:
        self.name = ""
        self.pid = 0


def _named() -> _Named:
    return runtime.current().of(_Named)


def client_name(identity: str) -> str:
    """The name the connections of the process ``identity`` carry: the identity, with
    what CLIENT SETNAME refuses (spaces, control and non-ASCII characters) as "_"."""
    return "cogworker:" + re.sub(r"[^!-~]", "_", identity)


def current() -> str:
    """The name this process's new connections get ("" when unnamed)."""
    named = _named()
    return named.name if named.pid == os.getpid() else ""


def options() -> dict[str, Any]:
    """What a new client's options gain: its ``client_name`` while this process names."""
    name = current()
    return {"client_name": name} if name else {}


def name_connections(client: Any, name: str) -> str:
    """Name every connection ``client`` opens from now on ``name`` (and those of clients
    built later: :func:`options`), once the server accepted the name on a connection of
    its own; the name in use, "" when naming is off, refused or not possible here (a
    cluster client: recovery falls back to ORPHAN_THRESHOLD there, docs/reliability.md).
    Connections already open are closed so that none stays unnamed."""
    named = _named()
    named.name, named.pid = "", os.getpid()
    if not conf.get().CLIENT_NAMES:
        return ""
    lazy = isinstance(client, cluster.LazyCluster)
    pool = getattr(client.probe if lazy else client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if pool is None or not isinstance(kwargs, dict):
        return ""
    trial = pool.connection_class(**kwargs)
    try:
        trial.connect()
        trial.send_command("CLIENT", "SETNAME", name)
        trial.read_response()
    except Exception as exc:  # noqa: BLE001 - refused (a proxy), or Redis away: unnamed
        log.warning(
            "connections not named (CLIENT SETNAME: %s): a killed worker's jobs are "
            "recovered after ORPHAN_THRESHOLD only (docs/reliability.md)",
            errors.describe(exc),
        )
        return ""
    finally:
        trial.disconnect()
    named.name = name
    if lazy:
        # A cluster client takes its nodes' options when it is built: the caller
        # rebuilds it (connection.reset), and every node's connections carry the name.
        return name
    kwargs["client_name"] = name
    pool.disconnect()  # none left unnamed; each is opened again, named, on its next use
    return name


def named_clients(conn: Any) -> set[str]:
    """The names of the connections the server holds now (``CLIENT LIST``, names only);
    on a cluster, those every master holds (a process's connections are spread over
    the masters of the slots it uses: it has none left when no master lists its name)."""
    found: set[str] = set()
    if cluster.is_cluster(conn):
        lists = [cluster.node_client(conn, node).client_list() for node in cluster.masters(conn)]
    else:
        lists = [conn.client_list()]
    for entries in lists:
        found.update(str(e["name"]) for e in entries if e.get("name"))
    return found


def server(conn: Any, key: str) -> Any:
    """The server that holds ``key`` (on a cluster, its slot's master), for its ``INFO``
    and ``CONFIG``: where the stamps are kept, and whose restart they come back from."""
    return cluster.data_node(conn, key) if cluster.is_cluster(conn) else conn
