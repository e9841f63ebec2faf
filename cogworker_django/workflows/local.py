"""Batches in the test modes (``testing.fake()``, ``testing.inline()``): the same rules as
the Lua scripts, kept in this process's memory, so that a test sees callbacks fire when
``drain()`` (or the inline run) finishes the members.

``testing`` installs :func:`run` as the way a recorded or inline job runs
(recording.set_runner); pushes of members come through :func:`register` first.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..core import client, payload
from ..store import errors, runtime
from . import context
from .signatures import BatchFinished, BatchNotFound, Signature, WorkflowError
from .status import BatchRecord, Failure
from .store import callback_payload, result_text

_lock = threading.RLock()


@dataclass
class State:
    bid: str
    kind: str
    description: str
    on_success: Signature | None
    on_complete: Signature | None
    keep_results: bool
    extra: dict[str, Any]
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    blocks: set[str] = field(default_factory=set)
    jids: list[str] = field(default_factory=list)
    pending: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)
    failed: dict[str, Failure] = field(default_factory=dict)
    failed_jobs: int = 0
    succeeded: int = 0
    results: dict[str, Any] = field(default_factory=dict)
    complete_at: float | None = None
    success_at: float | None = None
    complete_jid: str = ""
    success_jid: str = ""
    step: int = 0
    step_jid: str = ""


class _Batches(dict[str, "State"]):
    """The test modes' batches (id -> state), on the runtime (store/runtime.py)."""


def _batches() -> _Batches:
    return runtime.current().of(_Batches)


def clear() -> None:
    with _lock:
        _batches().clear()


def open_block(bid: str, token: str, created: Any, *, extra: dict | None = None) -> None:
    with _lock:
        state = _batches().get(bid)
        if created is not None:
            if state is not None:
                raise WorkflowError(f"batch {bid} exists already")
            state = _batches()[bid] = State(
                bid,
                created.kind,
                created.description,
                created.on_success,
                created.on_complete,
                created.keep_results,
                dict(extra or {}),
            )
            state.step = 1 if state.extra.get("steps") else 0
        elif state is None:
            raise BatchNotFound(f"no batch {bid} in this test")
        elif state.success_at is not None:
            raise BatchFinished(f"batch {bid} has succeeded: nothing can join it any more")
        state.blocks.add(token)


def register(job: dict[str, Any]) -> None:
    """Count ``job`` as a member before the test mode's sink takes it."""
    bid = job["bid"]
    with _lock:
        state = _batches().get(bid)
        if state is None:
            raise BatchNotFound(f"no batch {bid} in this test: the job was not pushed")
        if state.success_at is not None:
            raise BatchFinished(f"batch {bid} has succeeded: the job was not pushed")
        if job["jid"] not in state.pending:
            state.pending.add(job["jid"])
            state.waiting.add(job["jid"])
            state.jids.append(job["jid"])


def close_block(bid: str, token: str) -> None:
    with _lock:
        state = _batches().get(bid)
        if state is None or token not in state.blocks:
            return
        state.blocks.discard(token)
        due = _due(state)
    _push(due)


def _due(state: State) -> list[dict[str, Any]]:
    """The callbacks this moment makes due (marked fired); pushed by the caller."""
    state.updated_at = time.time()
    due: list[dict[str, Any]] = []
    if state.blocks:
        return due
    if not state.waiting and state.complete_at is None:
        state.complete_at = time.time()
        job = callback_payload(state.on_complete, state.bid, "complete")
        if job is not None:
            state.complete_jid = job["jid"]
            due.append(job)
    if not state.pending and state.success_at is None:
        state.success_at = time.time()
        job = callback_payload(state.on_success, state.bid, "success")
        if job is not None:
            state.success_jid = job["jid"]
            due.append(job)
    return due


def _push(due: list[dict[str, Any]]) -> None:
    for job in due:
        client.push(job)


def results(bid: str) -> list[Any]:
    with _lock:
        state = _batches().get(bid)
        if state is None:
            raise BatchNotFound(f"no batch {bid} in this test")
        return [state.results.get(jid) for jid in state.jids]


def run(job: dict[str, Any], perform: Any) -> Any:
    """Run a recorded or inline job with the batch bookkeeping a worker would do."""
    token = context.detach()  # what it enqueues does not join its caller's batch
    try:
        return _run(job, perform)
    finally:
        context.reattach(token)


def _run(job: dict[str, Any], perform: Any) -> Any:
    results_of = job.get("results_of")
    if isinstance(results_of, str) and results_of in _batches():
        from .middleware import run_with_first_argument

        return run_with_first_argument(job, results(results_of), lambda: perform(job))
    bid = job.get("bid")
    with _lock:
        state = _batches().get(bid) if isinstance(bid, str) else None
    if state is None:
        return perform(job)
    try:
        result = perform(job)
    except BaseException as exc:
        _failed(state, job, exc)
        raise
    _succeeded(state, job, result)
    return result


def _failed(state: State, job: dict[str, Any], exc: BaseException) -> None:
    jid = job["jid"]
    with _lock:
        if jid not in state.pending:
            return
        # The test modes never retry: a failure here is the job's last.
        state.failed[jid] = Failure(
            jid, payload.error_class(exc), errors.safe_str(exc, 500), True, time.time(), 0
        )
        if jid in state.waiting:
            state.waiting.discard(jid)
            state.failed_jobs += 1
        due = _due(state)
    _push(due)


def _succeeded(state: State, job: dict[str, Any], result: Any) -> None:
    jid = job["jid"]
    steps = job.get("chain")
    next_step = None
    if steps:
        result_text(result, job["func"])
        next_step = Signature.from_spec(steps[0]).build(
            result, bid=state.bid, chain=steps[1:], step=int(job.get("step") or 1) + 1
        )
    elif state.keep_results:
        result_text(result, job["func"])
    with _lock:
        if jid not in state.pending:
            return
    if next_step is not None:
        client.push(next_step)  # joins (register) before this step leaves
        with _lock:
            state.step = next_step["step"]
            state.step_jid = next_step["jid"]
    with _lock:
        if state.keep_results:
            state.results[jid] = result
        state.pending.discard(jid)
        state.waiting.discard(jid)
        state.failed.pop(jid, None)
        state.succeeded += 1
        due = _due(state)
    _push(due)


def status(bid: str) -> BatchRecord | None:
    with _lock:
        state = _batches().get(bid)
        if state is None:
            return None
        return BatchRecord(
            bid=bid,
            kind=state.kind,
            description=state.description,
            created_at=state.created_at,
            updated_at=state.updated_at,
            total=len(state.jids),
            succeeded=state.succeeded,
            pending=len(state.pending),
            waiting=len(state.waiting),
            failed_jobs=state.failed_jobs,
            failures=tuple(state.failed.values()),
            open_blocks=len(state.blocks),
            complete_at=state.complete_at,
            success_at=state.success_at,
            complete_jid=state.complete_jid,
            success_jid=state.success_jid,
            on_success=repr(state.on_success) if state.on_success else "",
            on_complete=repr(state.on_complete) if state.on_complete else "",
            steps=int(state.extra.get("steps") or 0),
            step=state.step,
            step_jid=state.step_jid,
            expires_in=None,
        )
