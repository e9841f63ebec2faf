"""The worker side of workflows: after a member's run, its outcome is recorded in its
batch by one script (lua/batch_update.lua), which also pushes the callbacks (and a
chain's next step) when that outcome is the one that finishes them.

Where a worker can die, and why nothing is lost or doubled:

- during the run, or after it and before the script: the job is still in the process's
  in-progress list; orphan recovery runs it again, and that run's outcome is recorded;
- inside the script: Redis runs a script whole or not at all (and each key's type is
  checked before the first write, so an error can't stop it half-way);
- after the script, before the ack: the job runs again, and its outcome finds the jid no
  longer pending: the script changes nothing, pushes nothing.

A success whose bookkeeping can't reach Redis (for ``store.PATIENCE`` seconds) is not
acked as done: the job is rescheduled (no failure counted) and runs again later. A job
that leaves without a run (dead as a poison job, deleted or killed by an operator)
counts as a failure through :func:`departed`; one that expired or was cancelled is in
no dead set, so :func:`departed` files a copy there too, the one way to finish its batch
(retried by hand, it runs and its success lets on_success fire).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..core import middleware, payload, unique
from ..store import connection, errors, keys
from . import store
from .signatures import Signature, WorkflowError

log = logging.getLogger("cogworker_django")

# Seconds before a job whose success could not be recorded runs again.
RESCHEDULE_DELAY = 5.0


class BatchMiddleware:
    """Built into every worker's server chain (innermost of the built-ins)."""

    payload_fields = ("bid", "results_of")  # a job in no batch passes through (RunChain)

    def __call__(self, job: dict[str, Any], queue: str, run: Callable[[], Any]) -> Any:
        results_of = job.get("results_of")
        if isinstance(results_of, str) and results_of:
            return with_results(job, results_of, lambda: self._member(job, run))
        return self._member(job, run)

    def _member(self, job: dict[str, Any], run: Callable[[], Any]) -> Any:
        bid = job.get("bid")
        if not isinstance(bid, str) or not bid:
            return run()
        try:
            result = run()
        except middleware.Reschedule:
            raise  # not an outcome: the job is still to run
        except BaseException as exc:
            record_failure(job, payload.error_class(exc), payload.error_message(exc), dead=None)
            raise
        try:
            record_success(job, result)
        except WorkflowError as exc:
            # The run can't be passed on (a return value JSON can't hold): a failure.
            record_failure(job, payload.error_class(exc), payload.error_message(exc), dead=None)
            raise
        return result


def with_results(job: dict[str, Any], bid: str, run: Callable[[], Any]) -> Any:
    """Run a callback that asked for the members' return values with them as its first
    argument (read now, from the batch); the payload keeps its own arguments."""
    values = store.patiently(lambda: store.results(bid))
    return run_with_first_argument(job, values, run)


def run_with_first_argument(job: dict[str, Any], value: Any, run: Callable[[], Any]) -> Any:
    """``run()`` with ``value`` put first in the job's arguments for the run only. The
    list is changed in place: the job was resolved before the chain ran (jobs.resolve
    holds that list), and the payload filed after a failure must hold its own arguments."""
    args = job.get("args")
    if not isinstance(args, list):
        args = job["args"] = []
    args.insert(0, value)
    try:
        return run()
    finally:
        if args and args[0] is value:
            del args[0]


def next_step(job: dict[str, Any], result: Any) -> tuple[dict[str, Any] | None, int]:
    """The payload of a chain's next step (its input first), built in Python (rule 3)."""
    steps = job.get("chain")
    if not steps or not isinstance(steps, list):
        return None, 0
    store.result_text(result, f"{job['func']} (a chain step)")
    number = int(job.get("step") or 1) + 1
    sig = Signature.from_spec(steps[0])
    try:
        built = sig.build(result, bid=job["bid"], chain=steps[1:], step=number)
    except (TypeError, ValueError) as exc:
        raise WorkflowError(
            f"{job['func']}: the next chain step can't take its return value "
            f"({errors.safe_str(exc)})"
        ) from None
    return built, number


def record_success(job: dict[str, Any], result: Any) -> None:
    bid = job["bid"]
    step, number = next_step(job, result)

    def once() -> store.Update:
        found = store.meta(bid)
        value = ""
        if found is not None and found.keep_results:
            value = store.result_text(result, job["func"])
        return store.update(
            bid, "success", job["jid"], found, value=value, next_step=step, step_number=number
        )

    try:
        outcome = store.patiently(once)
    except WorkflowError:
        raise
    except Exception as exc:  # noqa: BLE001 - Redis away (or a broken key): run it again later
        log.error(
            "%s (jid %s): its success could not be recorded in batch %s (%s): it runs again in %ss",
            job["func"],
            job["jid"],
            bid,
            errors.describe(exc),
            RESCHEDULE_DELAY,
        )
        raise middleware.Reschedule(
            RESCHEDULE_DELAY, "the batch bookkeeping could not reach Redis"
        ) from exc
    _log_fired(job, bid, outcome)


def record_failure(
    job: dict[str, Any],
    error_class: str,
    message: str,
    *,
    dead: bool | None,
    patience: float | None = None,
) -> None:
    """Count a failure of a member (never raises: the failure itself is what matters).
    ``dead`` None: whether this failure sends the job to dead is worked out here."""
    bid = job.get("bid")
    if not isinstance(bid, str) or not bid:
        return
    if dead is None:
        try:
            dead = unique.is_last_attempt(job)
        except Exception:  # noqa: BLE001 - a hand-made payload: say it is not
            dead = False
    record = store.failure_record(job, error_class, message, dead)
    try:
        outcome = store.patiently(
            lambda: store.update(bid, "failure", job["jid"], store.meta(bid), value=record),
            patience,
        )
    except Exception as exc:  # noqa: BLE001 - rule 4: never in the way of the filing
        log.error(
            "%s (jid %s): its failure could not be recorded in batch %s (%s)",
            job.get("func"),
            job.get("jid"),
            bid,
            errors.describe(exc),
        )
        return
    _log_fired(job, bid, outcome)


def _log_fired(job: dict[str, Any], bid: str, outcome: store.Update) -> None:
    for event, jid in (("on_complete", outcome.complete_jid), ("on_success", outcome.success_jid)):
        if jid:
            log.info("batch %s: %s fired (jid %s) after %s", bid, event, jid, job.get("jid"))


# How the departures of a member that never ran to its end, and is in no dead set, are
# worded (worker/processor.py, api/controls.py): the member expired before it started, or
# was cancelled (queued, scheduled, retrying or running).
NEVER_FINISHED = {"expired:": "JobExpired", "cancelled ": "JobCancelled"}


def departed(job: dict[str, Any], reason: str) -> None:
    """departures listener: a member that leaves without a run counts as failed (and in
    dead: it can only succeed if it is put back and run). One that expired or was
    cancelled is filed in its queue's dead set as well, ready to run (no ``expires_at``),
    so that an operator can finish the batch by retrying it; deleting it there leaves the
    batch stopped for good."""
    if not job.get("bid"):
        return
    error_class = next((c for p, c in NEVER_FINISHED.items() if reason.startswith(p)), None)
    if error_class is not None:
        errors.best_effort("Batch", lambda: _file_in_dead(job, error_class, reason))
    record_failure(job, error_class or "Departed", reason, dead=True, patience=0.0)


def _file_in_dead(job: dict[str, Any], error_class: str, reason: str) -> None:
    queue = job.get("queue")
    if not isinstance(queue, str) or not queue:
        return
    kept = {k: v for k, v in job.items() if k != "expires_at"}
    now = time.time()
    kept.update(error_class=error_class, error_message=reason, failed_at=now)
    kept.setdefault("first_failed_at", now)
    connection.get_client().zadd(keys.dead(keys.home_of(queue)), {payload.encode(kept): now})
