"""Settling what a process's record says is unsettled: on every beat, and once more at
shutdown, where whatever is left is handed over so that nothing is lost or run twice.

Shutdown hand-over (reliable fetch): first the record refuses settlement to every run
that finishes from then on (it is abandoned to its requeued copy) and waits for the
runs that finished before to settle themselves; then, in one atomic script
(lua/handover.lua):
- jobs only waiting for their ack are dropped from the in-progress list (acked);
- jobs that ran but could not be filed in retry/dead go to ``P:unsettled`` (any live
  process files them later; they never run again);
- everything else on the list (unfinished jobs, and any job whose fetch reply was lost)
  is pushed back on its queue, to the end taken next;
- if Redis is away, the hand-over is retried for up to ``HANDOVER_RETRY_SECONDS`` (a
  blip must not turn an acked-but-unconfirmed job into one run twice); if it still
  fails, the list stays as it is for orphan recovery.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from .. import connection, errors, keys, payload, priority, scripts
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


# How long a stopping process keeps retrying a hand-over that Redis refused (an outage
# or failover in progress), unless a second TERM cuts it short. Keep the deployment's
# stop timeout above SHUTDOWN_TIMEOUT + this (docs/workers.md).
HANDOVER_RETRY_SECONDS = 5.0
HANDOVER_RETRY_PAUSE = 0.5


def hand_over(manager: Manager, force: Any = None) -> bool:
    """Settle, hand over and requeue at shutdown; True when nothing is left to do.
    Retried while Redis is away, for up to HANDOVER_RETRY_SECONDS (``force`` set: no
    retries)."""
    from .manager import longest_fetch

    # First, runs that finish from now on are abandoned to their requeued copies; runs
    # that finished before are settled by their processors (one round trip each), or
    # left pending for the steps below. Never both (record.py).
    unsettled = manager.record.begin_hand_over(longest_fetch())
    if unsettled:
        log.warning("%d finished job(s) still settling at the hand-over", unsettled)
    give_up = time.monotonic() + HANDOVER_RETRY_SECONDS
    while True:
        try:
            _hand_over_once(manager)
        except Exception as exc:  # noqa: BLE001 - retried, then left to orphan recovery
            retry = (
                errors.is_unavailable(exc)
                and time.monotonic() < give_up
                and not (force is not None and force.is_set())
            )
            if retry:
                errors.report("Shutdown hand-over", exc)
                time.sleep(HANDOVER_RETRY_PAUSE)
                continue
            if isinstance(manager.fetcher, ReliableFetch):
                log.error(
                    "shutdown hand-over failed (%s): this process's in-progress jobs stay "
                    "listed and are recovered after ORPHAN_THRESHOLD",
                    errors.describe(exc),
                )
            else:
                log.error(
                    "shutdown hand-over failed (%s): with basic fetch, the unfinished "
                    "jobs not requeued are lost",
                    errors.describe(exc),
                )
            return False
        errors.recovered("Shutdown hand-over")
        return True


def _hand_over_once(manager: Manager) -> None:
    try:
        settle_pending(manager, connection.get_client())
    except Exception as exc:  # noqa: BLE001 - what's left is handed over below
        errors.report("Shutdown settlement", exc)
    if isinstance(manager.fetcher, ReliableFetch):
        _hand_over_reliable(manager)
    else:
        _hand_over_basic(manager)


def _hand_over_reliable(manager: Manager) -> None:
    """One atomic script; raises if it could not run (nothing changed then)."""
    conn = connection.get_client()
    key = keys.inprogress(manager.identity)
    pending = manager.record.pending()
    acks = [raw for raw, how in pending.items() if how == ACK]
    filings = {raw: how for raw, how in pending.items() if how != ACK}
    listed = Counter(text(r) for r in conn.lrange(key, 0, -1))
    # Every copy on the list is requeued, except one per pending settlement (two
    # identical payloads are two jobs).
    for raw in pending:
        if listed[raw] > 0:
            listed[raw] -= 1
    requeue = list(listed.elements())
    fallback = manager.fetcher.queues[0].name
    queue_keys = [priority.return_key(_queue_of(r, fallback)) for r in requeue]
    args: list[Any] = [len(acks), *map(wire, acks), len(filings)]
    for raw, filing in filings.items():
        args += [wire(raw), unsettled_entry(filing)]
    args += map(wire, requeue)
    acked, handed, requeued = scripts.run(
        "handover", conn, [key, keys.unsettled(), *queue_keys], args
    )
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
    """Basic fetch has no in-progress list: requeue from the in-memory record. Each job
    is pushed once (``manager.basic_handed`` remembers it across retries); raises if any
    could not be pushed, so the caller retries the rest."""
    conn = connection.get_client()
    done: set[int] = manager.basic_handed
    pending = manager.record.pending()
    moved = 0
    failure: Exception | None = None
    items: list[tuple[int, str, bytes]] = []
    for work in manager.record.running():
        if work.raw not in pending:
            items.append((id(work), priority.return_key(work.queue), wire(work.raw)))
    for raw, how in pending.items():
        if how != ACK:
            items.append((hash((raw, how)), keys.unsettled(), unsettled_entry(how).encode()))
    for ident, key, value in items:
        if ident in done:
            continue
        try:
            conn.rpush(key, value)
        except Exception as exc:  # noqa: BLE001 - one failure must not cost the others
            failure = exc
            continue
        done.add(ident)
        if key != keys.unsettled():
            moved += 1
    if moved:
        log.warning("requeued %d job(s) unfinished at shutdown", moved)
    if failure is not None:
        raise failure
