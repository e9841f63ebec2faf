"""What the port adds to Django's tests (not from Django): waiting for a real worker."""

from __future__ import annotations

import time

# A task run by the in-process worker ends within milliseconds; generous for a busy machine.
FINISH_TIMEOUT = 30.0
COGWORKER_BACKEND = "cogworker_django.tasks_backend.CogworkerBackend"
# Django's ImmediateBackend records the first failure as FAILED: no retries here either.
NO_RETRY = {"RETRY": False}


# The in-process worker of the running test (conftest.py).
worker = None


def enqueued_first(output: list[str]) -> list[str]:
    """Log records as Django's immediate backend orders them: the enqueuing thread's
    "enqueued" record first, then the worker's records in their own order. A real worker
    starts a task within a millisecond of its push (an idle worker is woken by the push:
    docs/workers.md "Pickup latency"), so its RUNNING record may come before the
    enqueuing thread's record of the same push."""
    return sorted(output, key=lambda line: " enqueued " not in line)


def enqueue_records(output: list[str]) -> list[str]:
    """The enqueuing thread's records alone: with a real worker the task also runs (and
    logs) while the test's block is still open."""
    return [line for line in output if " enqueued " in line]


def finished(result, timeout: float = FINISH_TIMEOUT):
    """``result``, refreshed until the worker has finished its task (successful or
    failed) and its run is over: the result is written before ``task_finished`` is sent,
    and the records Django's receivers log come with the signal, so a test reading them
    waits for the run to be settled too. An AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result.refresh()
        if result.is_finished and (
            worker is None or not worker.manager.ledger.running()
        ):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(
                f"task {result.task.name} ({result.id}) did not finish"
            )
        time.sleep(0.01)


async def afinished(result, timeout: float = FINISH_TIMEOUT):
    """:func:`finished` for an async test."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(finished)(result, timeout)
