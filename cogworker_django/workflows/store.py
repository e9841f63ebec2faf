"""The Redis side of batches: the three scripts and what feeds them.

(Over 400 lines: the callers of the three batch scripts, which build the same KEYS and
ARGV shapes.)

- ``lua/batch_open.lua``: create a batch, or reopen one, with a block token;
- ``lua/batch_push.lua``: push members and count them in the same step;
- ``lua/batch_update.lua``: one outcome (a member's success or failure, a block's end)
  and, when that outcome finishes the batch, its callbacks, in the same step.

With a home per queue a batch's keys (the prefix's home) and its jobs' queues are in
different hash slots: the scripts then put each job in the outbox (a list in the
batch's home) instead, in the same step, and the caller relays it to its queue right
after (outbox.py; the poller relays what a caller that died in between left there).

A batch's description, kind and callbacks never change once it is created, so a process
reads them once per batch (:func:`meta`) and builds every payload the scripts may push
here, in Python (rule 3), with a fresh jid and enqueue time.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import conf
from ..core import payload, route
from ..store import connection, errors, homes, keys, outbox, scripts
from .signatures import BatchFinished, BatchNotFound, Signature, WorkflowError

log = logging.getLogger("cogworker_django")

T = TypeVar("T")

# How long bookkeeping keeps trying while Redis is away before it gives up (a worker
# then reschedules the job, a caller gets the error).
PATIENCE = 10.0
# Batches whose description and callbacks a process keeps in memory.
META_CACHE_SIZE = 2048
# Longest error text kept with a member's failure (the job itself keeps the whole).
FAILURE_TEXT_LIMIT = 500

KINDS = ("batch", "chain", "group")


def now() -> float:
    return time.time()


def text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def patiently(fn: Callable[[], T], patience: float | None = None) -> T:
    """``fn()``, tried again while Redis is unavailable, for up to ``patience`` seconds
    (default :data:`PATIENCE`); a deterministic error (a key of the wrong type) is
    raised at once."""
    deadline = time.monotonic() + (PATIENCE if patience is None else patience)
    pause = 0.05
    while True:
        try:
            return fn()
        except Exception as exc:
            if not errors.is_unavailable(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


# Meta -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Meta:
    """What never changes about a batch once it is created."""

    bid: str
    kind: str
    description: str
    on_success: Signature | None
    on_complete: Signature | None
    keep_results: bool

    def fields(self) -> dict[str, str]:
        out = {"kind": self.kind, "description": self.description}
        if self.on_success is not None:
            out["on_success"] = self.on_success.spec_json()
        if self.on_complete is not None:
            out["on_complete"] = self.on_complete.spec_json()
        if self.keep_results:
            out["keep_results"] = "1"
        return out


_META_FIELDS = ("kind", "description", "on_success", "on_complete", "keep_results")
_meta_cache: OrderedDict[tuple[str, str], Meta] = OrderedDict()
_meta_lock = threading.Lock()


def remember(meta: Meta) -> None:
    with _meta_lock:
        _meta_cache[(keys.prefix(), meta.bid)] = meta
        _meta_cache.move_to_end((keys.prefix(), meta.bid))
        while len(_meta_cache) > META_CACHE_SIZE:
            _meta_cache.popitem(last=False)


def parse_meta(bid: str, values: list[Any]) -> Meta | None:
    kind, description, on_success, on_complete, keep = (text(v) for v in values)
    if not kind:
        return None

    def sig(spec: str) -> Signature | None:
        if not spec:
            return None
        try:
            return Signature.from_spec(spec)
        except (ValueError, TypeError, WorkflowError) as exc:
            log.error("batch %s: a callback can't be read (%s): it will not fire", bid, exc)
            return None

    return Meta(bid, kind, description, sig(on_success), sig(on_complete), keep == "1")


def meta(bid: str, conn: Any = None) -> Meta | None:
    """The batch's meta (read once per process), or None when there is no such batch."""
    key = (keys.prefix(), bid)
    with _meta_lock:
        found = _meta_cache.get(key)
    if found is not None:
        return found
    conn = conn or connection.get_client()
    found = parse_meta(bid, conn.hmget(keys.batch(bid), _META_FIELDS))
    if found is not None:
        remember(found)
    return found


# Opening and pushing ------------------------------------------------------------------------


def open_block(bid: str, token: str, created: Meta | None, *, extra: dict | None = None) -> None:
    """Create the batch (``created`` given) or reopen it, holding ``token``'s block."""
    at_now = now()
    fields: list[str] = []
    if created is not None:
        for k, v in {**created.fields(), **(extra or {})}.items():
            fields += [k, str(v)]
    answer = text(
        scripts.run(
            "batch_open",
            connection.get_client(),
            [keys.batch(bid), keys.batches()],
            [
                bid,
                "create" if created is not None else "reopen",
                token,
                repr(at_now),
                unfinished_ttl(),
                repr(at_now - max(unfinished_ttl(), finished_ttl()) - 60),
                *fields,
            ],
        )
    )
    if answer == "ok":
        if created is not None:
            remember(created)
        return
    if answer == "exists":
        raise WorkflowError(f"batch {bid} exists already")
    if answer == "gone":
        raise BatchNotFound(f"no batch {bid} (never created, or expired)")
    if answer == "finished":
        raise BatchFinished(f"batch {bid} has succeeded: nothing can join it any more")
    raise WorkflowError(f"batch {bid}: unexpected answer {answer!r}")


def unfinished_ttl() -> int:
    return conf.get().BATCH_UNFINISHED_TTL


def finished_ttl() -> int:
    return conf.get().BATCH_TTL


def _target(job: dict[str, Any], at_now: float) -> tuple[str, str, str]:
    """(key, value, score) of where ``job`` waits, as client.push would put it."""
    where = route.placement(job, at_now)
    return where.key, where.value, where.score_arg


def push(bid: str, jobs: list[dict[str, Any]]) -> int:
    """Push ``jobs`` (all of batch ``bid``) and count them, in one script: all or none.
    With a home per queue the script puts them in the outbox and they are relayed from
    there at once (:func:`push_counted`, outbox.py)."""
    conn = connection.get_client()
    answer, envelopes = push_counted(bid, jobs, conn)
    outbox.relay(conn, envelopes)
    return answer


def push_counted(
    bid: str,
    jobs: list[dict[str, Any]],
    conn: Any = None,
    markers: list[str] | None = None,
    lease: outbox.Lease | None = None,
) -> tuple[int, list[str]]:
    """The script of :func:`push`, without the relay: the number of jobs pushed and the
    outbox envelopes standing for them (none off spread, where the script pushes into
    the queues itself). Raises BatchNotFound / BatchFinished when nothing was pushed.
    ``markers`` (durable members, durable/relay.py): each job's relay marker, set with
    its push; a job whose marker is there is skipped (pushed by an earlier relay).
    ``lease`` (the same relay's): once it has run out nothing is pushed, and
    outbox.LeaseExpired is raised."""
    at_now = now()
    batch_home = homes.Home.root()  # a batch's keys (keys.batch)
    targets: list[str] = []
    envelopes: list[str] = []
    args: list[Any] = [bid, repr(at_now), unfinished_ttl(), *outbox.lease_args(lease)]
    for job in jobs:
        key, value, score = _target(job, at_now)
        home = homes.Home.of_job(job)
        scheduled = key == home.schedule()
        if home.crosses(batch_home):
            # The queue's home is another slot: the job goes to the outbox (in the
            # batch's home), counted in the same step; the relay pushes it on. Its
            # queue is listed even when it is scheduled: the poller finds a schedule by
            # its queue (homes.py), as client._schedule lists it.
            value = outbox.envelope(key, value, score, job["queue"])
            envelopes.append(value)
            key, score, listed = keys.outbox(), "", job["queue"]
        else:
            listed = "" if scheduled else job["queue"]
        if key not in targets:
            targets.append(key)
        ring = 0
        if score == "" and key == keys.queue(job["queue"]):
            # Its queue's doorbell (in the queue's home, as the list): rung when the push
            # finds the list empty, so an idle worker starts the member at once, as it
            # does a job enqueued outside a batch (store/bell.py).
            doorbell = keys.bell(job["queue"])
            if doorbell not in targets:
                targets.append(doorbell)
            ring = 7 + targets.index(doorbell)
        args += [7 + targets.index(key), value, score, job["jid"], listed, 0, ring]
    for i, marker in enumerate(markers or ()):
        targets.append(marker)
        args[5 + 7 * i + 5] = 6 + len(targets)
    answer = scripts.run(
        "batch_push",
        conn or connection.get_client(),
        [
            keys.batch(bid),
            keys.batch_pending(bid),
            keys.batch_waiting(bid),
            keys.batch_jids(bid),
            keys.queues(),
            keys.batches(),
            *targets,
        ],
        args,
    )
    if isinstance(answer, int):
        return answer, envelopes
    answer = text(answer)
    if answer == "gone":
        raise BatchNotFound(f"no batch {bid} (never created, or expired): the job was not pushed")
    if answer == "stale":
        raise outbox.LeaseExpired(f"batch {bid}: the relay's lease ran out: nothing pushed")
    if answer == "finished":
        raise BatchFinished(
            f"batch {bid} has succeeded: nothing can join it any more (the job was not pushed)"
        )
    raise WorkflowError(f"batch {bid}: unexpected answer {answer!r}")


def push_durable(
    bid: str, jobs: list[dict[str, Any]], conn: Any, lease: outbox.Lease | None = None
) -> tuple[int, list[str]]:
    """Durable members of batch ``bid`` from the database outbox (durable/relay.py): each
    pushed and counted with its relay marker (in the batch's home) in one script, then
    relayed on from the outbox with a home per queue; returns how many were pushed and
    the markers. Raises outbox.LeaseExpired (nothing pushed) once ``lease`` ran out."""
    markers = [keys.relayed(job["jid"], keys.root()) for job in jobs]
    pushed, envelopes = push_counted(bid, jobs, conn, markers, lease)
    outbox.relay_present(conn, envelopes)  # not those skipped: pushed by an earlier relay
    return pushed, markers


def close_durable(bid: str, token: str) -> None:
    """Close the block ``token`` of batch ``bid`` whose durable members are all pushed
    (durable/relay.py)."""
    update(bid, "close", token, meta(bid))


# Outcomes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Update:
    status: str  # "done", "seen" (already counted) or "gone" (no such batch)
    complete_jid: str  # the on_complete job this call pushed, or ""
    success_jid: str  # the on_success job this call pushed, or ""


def callback_payload(sig: Signature | None, bid: str, event: str) -> dict[str, Any] | None:
    if sig is None:
        return None
    extra: dict[str, Any] = {"callback_of": bid, "callback_event": event}
    if sig.wants_results:
        extra["results_of"] = bid
    return sig.build(**extra)


def update(
    bid: str,
    op: str,
    ident: str,
    found: Meta | None,
    *,
    value: str = "",
    next_step: dict[str, Any] | None = None,
    step_number: int = 0,
    conn: Any = None,
) -> Update:
    """Run lua/batch_update.lua once: ``op`` is "success", "failure" or "close", ``ident``
    the member's jid (the block token for close). Payloads of the callbacks are built
    now, fresh; the script pushes them only if this outcome finishes the batch. With a
    home per queue it puts them in the outbox, and those it did are relayed at once
    (:func:`update_counted`, outbox.py)."""
    conn = conn or connection.get_client()
    outcome, envelopes = update_counted(
        bid, op, ident, found, value=value, next_step=next_step, step_number=step_number, conn=conn
    )
    outbox.relay_present(conn, envelopes)
    return outcome


def update_counted(
    bid: str,
    op: str,
    ident: str,
    found: Meta | None,
    *,
    value: str = "",
    next_step: dict[str, Any] | None = None,
    step_number: int = 0,
    conn: Any = None,
) -> tuple[Update, list[str]]:
    """The script of :func:`update`, without the relay: its outcome and the envelopes
    it was given for the outbox (none off spread). Only those it fired are in the
    outbox: the callbacks of an outcome that does not finish the batch are not."""
    complete = callback_payload(found.on_complete if found else None, bid, "complete")
    success = callback_payload(found.on_success if found else None, bid, "success")
    placeholder = keys.batch(bid)
    envelopes: list[str] = []

    def parts(job: dict[str, Any] | None) -> tuple[str, list[str]]:
        if job is None:
            return placeholder, ["", "", ""]
        key, encoded = keys.queue(job["queue"]), payload.encode(job)
        if homes.Home.of_job(job).crosses(homes.Home.root()):  # through the outbox
            encoded = outbox.envelope(key, encoded, "", job["queue"])
            envelopes.append(encoded)
            key = keys.outbox()
        return key, [encoded, job["jid"], job["queue"]]

    complete_key, complete_args = parts(complete)
    success_key, success_args = parts(success)
    next_key, next_args = parts(next_step)
    reply = scripts.run(
        "batch_update",
        conn or connection.get_client(),
        [
            keys.batch(bid),
            keys.batch_pending(bid),
            keys.batch_waiting(bid),
            keys.batch_failed(bid),
            keys.batch_results(bid),
            keys.batch_jids(bid),
            keys.batches(),
            keys.queues(),
            complete_key,
            success_key,
            next_key,
        ],
        [
            bid,
            op,
            ident,
            repr(now()),
            unfinished_ttl(),
            finished_ttl(),
            value,
            *complete_args,
            *success_args,
            *next_args,
            step_number,
        ],
    )
    status, complete_jid, success_jid = (text(v) for v in reply)
    return Update(status, complete_jid, success_jid), envelopes


def failure_record(job: dict[str, Any], error_class: str, message: str, dead: bool) -> str:
    """The JSON kept for a member's last failure (built in Python, rule 3)."""
    return json.dumps(
        {
            "error_class": error_class,
            "error_message": message[:FAILURE_TEXT_LIMIT],
            "dead": dead,
            "at": now(),
            "retry_count": job.get("retry_count") or 0,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def results(bid: str, conn: Any = None) -> list[Any]:
    """The return values of the batch's members, in the order they were added (None for
    one that has not succeeded)."""
    conn = conn or connection.get_client()
    pipe = conn.pipeline(transaction=False)
    pipe.exists(keys.batch(bid))
    pipe.lrange(keys.batch_jids(bid), 0, -1)
    exists, jids = pipe.execute()
    if not exists:
        raise BatchNotFound(f"the results of batch {bid} are gone (the batch expired: BATCH_TTL)")
    if not jids:
        return []
    values = conn.hmget(keys.batch_results(bid), jids)
    return [None if v is None else json.loads(v) for v in values]


def result_text(value: Any, where: str) -> str:
    """``value`` as JSON text to keep; WorkflowError naming ``where`` when JSON can't
    hold it as it is."""
    try:
        payload.check_arguments(where, [value], {})
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise WorkflowError(
            f"{where}: its return value must be JSON for the workflow to pass it on "
            f"({errors.safe_str(exc)})"
        ) from None
