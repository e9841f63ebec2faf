"""Database periodic entries with real workers: rows written on the test databases of
tests/durable_support.py (SQLite and PostgreSQL), workers pointed at the same database
(the test project's router, TESTPROJECT_PERIODIC_DB), runs read back from what
``testapp.jobs.periodic_note`` appends (the entry and the slot from each run's payload)."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from cogworker_django.models import PeriodicEntry

from .. import durable_support
from ..helpers import FAST_SETTINGS

NOTE = "testapp.jobs.periodic_note"

database = durable_support.durable_db
db_alias = durable_support.db_alias


def worker_env(alias: str) -> dict[str, str]:
    return {**durable_support.worker_env(), "TESTPROJECT_PERIODIC_DB": alias}


def start_workers(worker, alias: str, count: int, *, settings: dict | None = None, **kwargs):
    """``count`` workers at once (each waited for once all are launched)."""
    env = {**worker_env(alias), **kwargs.pop("env", {})}
    started = [
        worker(env=env, settings={**FAST_SETTINGS, **(settings or {})}, wait=False, **kwargs)
        for _ in range(count)
    ]
    for w in started:
        w.wait_for_log(r"cogworker \S+ started", timeout=60)
    return started


def add(alias: str, name: str, cron: str, **fields: Any) -> PeriodicEntry:
    row = PeriodicEntry(name=name, cron=cron, job=fields.pop("job", NOTE), **fields)
    row.full_clean(validate_unique=False)  # (the uniqueness check reads "default")
    row.save(using=alias)
    return row


def change(alias: str, entry: str, **fields: Any) -> float:
    """Save ``fields`` on the row (as the admin does); returns when the save returned."""
    row = PeriodicEntry.objects.using(alias).get(name=entry)
    for key, value in fields.items():
        setattr(row, key, value)
    row.full_clean(validate_unique=False)  # (the uniqueness check reads "default")
    row.save(using=alias)
    return time.time()


def delete(alias: str, name: str) -> float:
    PeriodicEntry.objects.using(alias).get(name=name).delete()
    return time.time()


def notes(r, prefix: str, entry: str | None = None) -> list[dict]:
    found = [json.loads(x) for x in r.lrange(f"{prefix}:test:notes", 0, -1)]
    return [n for n in found if entry is None or n["entry"] == entry]


def once_each(runs: list[dict]) -> dict[int, dict]:
    """The runs by slot; fails when a slot ran twice."""
    twice = {s: c for s, c in Counter(n["slot"] for n in runs).items() if c > 1}
    assert twice == {}, f"slots run more than once: {twice}"
    return {n["slot"]: n for n in runs}


class TcpGate:
    """A TCP forwarder in front of a server (PostgreSQL here) that a test closes and opens
    again on the same port: closed, every connection through it is cut and new ones are
    refused, as when the server is stopped."""

    def __init__(self, host: str, port: int) -> None:
        from ..helpers import free_port

        self.target = (host, port)
        self.port = free_port()
        self._socks: list = []
        self._listener = None
        self.open()

    def open(self) -> None:
        import socket
        import threading

        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def _accept(self, listener) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            if self._listener is not listener:  # closed meanwhile: cut this one too
                client.close()
                upstream.close()
                return
            self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        import socket

        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self._socks.clear()
