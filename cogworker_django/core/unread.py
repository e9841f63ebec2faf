"""A push to a queue nobody reads: in no ``QUEUES`` setting (``COGWORKER["QUEUES"]``,
a ``TASKS`` backend's) and in no live worker's queues. Its jobs would wait for ever, and
the likely cause is a typo (``using(queue="defualt")``), so the first push to such a
name logs one warning, with the names it may have meant; the push itself goes on (a
worker started later with ``-q`` may be the plan).

Each name is judged once per process: one read of ``P:live_queues`` for a name the
settings don't hold, never again for that name, and never a failed push for it (a read
that fails says nothing).
"""

from __future__ import annotations

import difflib
import logging
import threading
import time
from typing import Any

from .. import conf
from ..store import connection, keys, runtime
from ..store.codec import raw_text

log = logging.getLogger("cogworker_django")

# How recently a worker must have read a queue (P:live_queues) to count as reading it:
# a few beats, as the admin's Queues page counts (api/queues.read_window).
BEATS_OF_LIFE = 4


class _Judged(set[str]):
    """The queues this process has judged (warned about or not), on its runtime."""


_lock = threading.Lock()


def configured() -> set[str]:
    """Every queue a setting names: ``COGWORKER["QUEUES"]`` and each ``TASKS`` backend's."""
    names = set(conf.get().queue_names)
    try:
        from django.conf import settings

        for backend in (getattr(settings, "TASKS", None) or {}).values():
            names.update(str(q) for q in (backend.get("QUEUES") or ()))
    except Exception:  # noqa: BLE001 - a broken TASKS setting is Django's to report
        pass
    return names


def check(queue: Any) -> None:
    """Warn once if ``queue`` is read by no setting and no live worker. Never raises."""
    if not isinstance(queue, str):
        return
    judged = runtime.current().of(_Judged)
    if queue in judged:
        return
    with _lock:
        if queue in judged:
            return
        judged.add(queue)
    try:
        _judge(queue)
    except Exception:  # noqa: BLE001 - a warning's own trouble never fails a push
        pass


def _judge(queue: str) -> None:
    names = configured()
    if queue in names:
        return
    since = time.time() - max(2.0, BEATS_OF_LIFE * conf.get().HEARTBEAT_INTERVAL)
    live = {
        raw_text(q)
        for q in connection.get_client().zrangebyscore(keys.live_queues(), since, "+inf")
    }
    if queue in live:
        return
    near = difflib.get_close_matches(queue, sorted(names | live), n=3, cutoff=0.6)
    log.warning(
        "queue %r is in no QUEUES setting and no live worker reads it: its jobs wait until a "
        "worker runs with -q %s%s (logged once per queue)",
        queue,
        queue,
        f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else "",
    )


def forget() -> None:
    """Judge every name again (the settings changed)."""
    with _lock:
        runtime.current().of(_Judged).clear()
