"""Settling what a process's record says is unsettled: on every beat, and once more at
shutdown, where whatever is left is handed over so that nothing is lost or run twice.

Shutdown hand-over: first the record refuses settlement to every run that finishes
from then on (it is abandoned to its requeued copy) and waits for the runs that finished
before to settle themselves; then the fetch strategy hands over what is left in one step
(reliable fetch, lua/handover.lua: pending acks dropped from the in-progress list,
finished-but-unfiled jobs to ``P:unsettled`` where any live process files them, and
everything else back on its queue, at the end taken next; basic fetch: the record's
unfinished jobs pushed back). If Redis is away, the hand-over is retried for up to
``HANDOVER_RETRY_SECONDS`` (a blip must not turn an acked-but-unconfirmed job into one
run twice); if it still fails, the list stays as it is for orphan recovery.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..core import results
from ..store import connection, errors
from .fetch import FetchStrategy
from .record import ACK, Record

log = logging.getLogger("cogworker_django")

# How long a stopping process keeps retrying a hand-over that Redis refused (an outage
# or failover in progress), unless a second TERM cuts it short. Keep the deployment's
# stop timeout above SHUTDOWN_TIMEOUT + this (docs/workers.md).
HANDOVER_RETRY_SECONDS = 5.0
HANDOVER_RETRY_PAUSE = 0.5


def settle_pending(record: Record, strategy: FetchStrategy, conn: Any) -> None:
    """Retry every pending ack and filing; raises on an outage (the beat reports it)."""
    for raw, how in record.pending().items():
        if how == ACK:
            if raw in record.running_raws():
                continue  # a processor is still about to ack it with its next fetch
            strategy.ack(conn, raw, record.ended_of(raw))
        else:
            assert not isinstance(how, str)
            strategy.file(conn, raw, how, record.ended_of(raw))
        record.settled(raw, how)


def hand_over(record: Record, strategy: FetchStrategy, force: Any = None) -> bool:
    """Settle, hand over and requeue at shutdown; True when nothing is left to do.
    Retried while Redis is away, for up to HANDOVER_RETRY_SECONDS (``force`` set: no
    retries)."""
    # First, runs that finish from now on are abandoned to their requeued copies; runs
    # that finished before are settled by their processors (one round trip each), or
    # left pending for the steps below. Never both (record.py).
    unsettled = record.begin_hand_over(connection.longest_call())
    if unsettled:
        log.warning("%d finished job(s) still settling at the hand-over", unsettled)
    give_up = time.monotonic() + HANDOVER_RETRY_SECONDS
    while True:
        try:
            _hand_over_once(record, strategy)
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
            log.error(
                "shutdown hand-over failed (%s): %s", errors.describe(exc), strategy.left_behind
            )
            return False
        errors.recovered("Shutdown hand-over")
        return True


def _hand_over_once(record: Record, strategy: FetchStrategy) -> None:
    conn = connection.get_client()
    try:
        settle_pending(record, strategy, conn)
    except Exception as exc:  # noqa: BLE001 - what's left is handed over below
        errors.report("Shutdown settlement", exc)
    # The outcomes of what is still pending (its acks are dropped, its filings handed
    # to P:unsettled below): kept first, best-effort (rule 4).
    ends = [e for e in map(record.ended_of, record.pending()) if e is not None]
    errors.best_effort("Results", lambda: results.keep(conn, ends))
    strategy.hand_over(conn, record)
