"""Settling what a process's record says is unsettled: on every beat, and once more at
shutdown, where whatever is left is handed over so that nothing is lost or run twice.

Shutdown hand-over (reliable fetch), in one atomic script (lua/handover.lua):
- jobs only waiting for their ack are dropped from the in-progress list (acked);
- jobs that ran but could not be filed in retry/dead go to ``P:unsettled`` (any live
  process files them later; they never run again);
- everything else on the list (unfinished jobs, and any job whose fetch reply was lost)
  is pushed back on its queue, to the end taken next;
- if even that fails, the list stays as it is for orphan recovery.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from .. import connection, errors, keys, payload, scripts
from .fetch import ReliableFetch, text, wire
from .processor import file_job
from .record import ACK, Filing

if TYPE_CHECKING:
    from .manager import Manager

log = logging.getLogger("cogworker_django")


def settle_pending(manager: Manager, conn: Any) -> None:
    """Retry every pending ack and filing; raises on an outage (the beat reports it)."""
    fetcher = manager.fetcher
    for raw, how in manager.record.pending().items():
        if how == ACK:
            if raw in manager.record.running_raws():
                continue  # a processor is still about to ack it with its next fetch
            fetcher.ack(conn, raw)
        else:
            file_job(conn, fetcher.settle_key(), raw, how)
        manager.record.settled(raw, how)


def unsettled_entry(filing: Filing) -> str:
    return json.dumps({"target": filing.target, "score": filing.score, "payload": filing.payload})


def hand_over(manager: Manager) -> None:
    try:
        settle_pending(manager, connection.get_client())
    except Exception as exc:  # noqa: BLE001 - what's left is handed over below
        errors.report("Shutdown settlement", exc)
    if isinstance(manager.fetcher, ReliableFetch):
        _hand_over_reliable(manager)
    else:
        _hand_over_basic(manager)


def _hand_over_reliable(manager: Manager) -> None:
    conn = connection.get_client()
    key = keys.inprogress(manager.identity)
    pending = manager.record.pending()
    acks = [raw for raw, how in pending.items() if how == ACK]
    filings = {raw: how for raw, how in pending.items() if how != ACK}
    try:
        listed = [text(r) for r in conn.lrange(key, 0, -1)]
        requeue = [r for r in dict.fromkeys(listed) if r not in pending]
        fallback = manager.fetcher.queues[0].name
        queue_keys = [keys.queue(_queue_of(r, fallback)) for r in requeue]
        args: list[Any] = [len(acks), *map(wire, acks), len(filings)]
        for raw, filing in filings.items():
            args += [wire(raw), unsettled_entry(filing)]
        args += map(wire, requeue)
        acked, handed, requeued = scripts.run(
            "handover", conn, [key, keys.unsettled(), *queue_keys], args
        )
    except Exception as exc:  # noqa: BLE001 - left on the list for orphan recovery
        log.error(
            "shutdown hand-over failed (%s): this process's in-progress jobs stay "
            "listed and are recovered after ORPHAN_THRESHOLD",
            errors.describe(exc),
        )
        return
    for raw, how in pending.items():
        manager.record.settled(raw, how)
    if requeued:
        log.warning("requeued %d job(s) unfinished at shutdown", requeued)
    if handed:
        log.warning(
            "handed %d finished job(s) that could not be filed to %s", handed, keys.unsettled()
        )


def _queue_of(raw: str, fallback: str) -> str:
    job = payload.decode(wire(raw))
    queue = job.get("queue")
    # An unparseable payload has no queue of its own: it goes to the first configured
    # queue, where a processor files it in dead with its raw bytes.
    return queue if isinstance(queue, str) and queue else fallback


def _hand_over_basic(manager: Manager) -> None:
    """Basic fetch has no in-progress list: requeue from the in-memory record."""
    conn = connection.get_client()
    pending = manager.record.pending()
    moved = 0
    for work in manager.record.running():
        if work.raw in pending:
            continue
        try:
            conn.rpush(keys.queue(work.queue), wire(work.raw))
            moved += 1
        except Exception as exc:  # noqa: BLE001 - one failure must not cost the others
            log.error(
                "could not requeue a job of %s at shutdown (lost with basic fetch): %s",
                work.queue,
                errors.describe(exc),
            )
    for how in pending.values():
        if how == ACK:
            continue
        try:
            conn.rpush(keys.unsettled(), unsettled_entry(how))
        except Exception as exc:  # noqa: BLE001
            log.error(
                "could not hand over a finished job to %s: %s",
                keys.unsettled(),
                errors.describe(exc),
            )
    if moved:
        log.warning("requeued %d job(s) unfinished at shutdown", moved)
