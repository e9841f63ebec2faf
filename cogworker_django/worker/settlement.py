"""Settling what this process's ledger says Redis refused (PENDING): on every beat, and
once more at shutdown, where whatever is left is handed over so that nothing is lost or
run twice.

Shutdown hand-over: first the ledger refuses settlement to every run that finishes
from then on (it is abandoned to its requeued copy) and waits for the runs that finished
before to settle themselves; then the fetch strategy hands over what is left in one step
(reliable fetch, lua/handover.lua: pending acks dropped from the in-progress list,
finished-but-unfiled jobs to ``P:unsettled`` where any live process files them, and
everything else back on its queue, at the end taken next; basic fetch: the ledger's
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
from .ledger import ACKING, PENDING, Ledger

log = logging.getLogger("cogworker_django")

# How long a stopping process keeps retrying a hand-over that Redis refused (an outage
# or failover in progress), unless a second TERM cuts it short. Keep the deployment's
# stop timeout above SHUTDOWN_TIMEOUT + this (docs/workers.md).
HANDOVER_RETRY_SECONDS = 5.0
HANDOVER_RETRY_PAUSE = 0.5


def settle_pending(ledger: Ledger, strategy: FetchStrategy, conn: Any) -> None:
    """Retry every pending ack and filing; raises on an outage (the beat reports it)."""
    for work in ledger.pending():
        if work.filing is None:
            strategy.ack(conn, work.raw, work.ended)
        else:
            strategy.file(conn, work.raw, work.filing, work.ended)
        ledger.settled(work)


def hand_over(ledger: Ledger, strategy: FetchStrategy, force: Any = None) -> bool:
    """Settle, hand over and requeue at shutdown; True when nothing is left to do.
    Retried while Redis is away, for up to HANDOVER_RETRY_SECONDS (``force`` set: no
    retries)."""
    # First, runs that finish from now on are abandoned to their requeued copies; runs
    # that finished before are settled by their processors (one round trip each), or
    # left pending for the steps below. Never both (ledger.py).
    unsettled = ledger.begin_hand_over(connection.longest_call())
    if unsettled:
        log.warning("%d finished job(s) still settling at the hand-over", unsettled)
    give_up = time.monotonic() + HANDOVER_RETRY_SECONDS
    while True:
        try:
            _hand_over_once(ledger, strategy)
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


def _hand_over_once(ledger: Ledger, strategy: FetchStrategy) -> None:
    conn = connection.get_client()
    try:
        settle_pending(ledger, strategy, conn)
    except Exception as exc:  # noqa: BLE001 - what's left is handed over below
        errors.report("Shutdown settlement", exc)
    # The outcomes of what is still pending (its acks are dropped, its filings handed
    # to P:unsettled below): kept first, best-effort (rule 4).
    ends = [w.ended for w in ledger.works(PENDING, ACKING) if w.ended is not None]
    errors.best_effort("Results", lambda: results.keep(conn, ends))
    strategy.hand_over(conn, ledger)
