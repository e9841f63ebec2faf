"""Testing helpers: run your code's ``enqueue`` calls without a worker.

``fake()`` records pushed jobs instead of sending them to Redis; ``inline()`` runs each
job the moment it is enqueued. Jobs pass through JSON on the way, as they would
through Redis, so a test fails on arguments a real push would refuse.

    with testing.fake():
        send_welcome.enqueue(1)
        assert len(send_welcome.jobs) == 1
        send_welcome.drain()
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from .core import client, jobs, payload, recording
from .core.recording import recorded
from .workflows import local as workflows_local

__all__ = ["clear", "drain", "fake", "inline", "perform_one", "prefix", "recorded"]


def _run_now(job: dict[str, Any]) -> str:
    job = json.loads(payload.encode(job))
    job.pop("at", None)
    recording.run(job, jobs.perform)
    jid: str = job["jid"]
    return jid


# ``TESTING = "fake"`` / ``"inline"``: the sink ``client`` uses when no context is active.
client.install_mode_sink("fake", recording.record)
client.install_mode_sink("inline", _run_now)
# Recorded and inline jobs run with the batch bookkeeping a worker does (callbacks, chain
# steps), kept in memory.
recording.set_runner(workflows_local.run)


def clear(func: str | None = None) -> None:
    """Forget the recorded jobs (of ``func``, or all; all also forgets the test modes'
    batches)."""
    recording.clear(func)
    if func is None:
        workflows_local.clear()


@contextlib.contextmanager
def _divert(fn: client.Sink | None) -> Iterator[None]:
    previous = client.set_diverter(fn)
    try:
        yield
    finally:
        client.set_diverter(previous)


@contextlib.contextmanager
def fake() -> Iterator[None]:
    """Record jobs instead of pushing them; the record is cleared on entry and exit."""
    clear()
    with _divert(recording.record):
        try:
            yield
        finally:
            clear()


@contextlib.contextmanager
def inline() -> Iterator[None]:
    """Run each job synchronously when it is enqueued (exceptions reach the caller)."""
    with _divert(_run_now):
        yield


def perform_one(func: str | None = None) -> Any:
    """Run the oldest recorded job (of ``func``, or of any job); returns its result."""
    job = recording.take_oldest(func)
    if job is None:
        raise LookupError(f"no recorded job{' of ' + func if func else ''} to perform")
    return recording.run(job, jobs.perform)


def drain(func: str | None = None) -> int:
    """Run recorded jobs (of ``func``, or all) until none is left, including the jobs
    they enqueue; returns how many ran."""
    count = 0
    while (job := recording.take_oldest(func)) is not None:
        recording.run(job, jobs.perform)
        count += 1
    return count


def prefix() -> str:
    """The prefix this process's keys are under now: in a test run, the test prefix
    (``COGWORKER["TEST_PREFIX"]``, default ``"test_"`` + PREFIX); give it to a worker
    your test starts in a subprocess (docs/testing.md)."""
    from . import conf

    return conf.get().PREFIX
