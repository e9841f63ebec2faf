"""Jobs of the chaos soak (``python -m bench.soak``): each run traces itself (trace.py).

They do no Redis calls of their own, so a run's outcome depends only on the worker.
"""

from __future__ import annotations

import asyncio
import random
import time

from cogworker_django import current_job, job

from . import trace


@job
def plain(token):
    with trace.run("plain", token=token):
        time.sleep(random.uniform(0.0, 0.05))


@job
async def plain_async(token):
    with trace.run("plain_async", token=token):
        await asyncio.sleep(random.uniform(0.0, 0.05))


@job
def slow(token, seconds):
    with trace.run("slow", token=token):
        time.sleep(seconds)


@job(retry=5)
def flaky(token, fail_times):
    """Fails its first ``fail_times`` attempts (by the payload's retry count), then succeeds."""
    with trace.run("flaky", token=token):
        if int(current_job().get("retry_count") or 0) < fail_times:
            raise RuntimeError(f"soak: planned failure of {token}")


@job(unique="until_executed")
def unique_until_executed(key):
    with trace.run("unique_until_executed", key=key):
        time.sleep(random.uniform(0.2, 1.0))


@job(unique="until_started")
def unique_until_started(key):
    with trace.run("unique_until_started", key=key):
        time.sleep(random.uniform(0.2, 1.0))


@job(unique="while_executing")
def unique_while_executing(key):
    with trace.run("unique_while_executing", key=key):
        time.sleep(random.uniform(0.2, 1.0))


@job(queue="critical")
def tick():
    """The every-second periodic entry ``soak-tick``."""
    with trace.run("tick"):
        time.sleep(random.uniform(0.0, 0.05))


@job(queue="critical")
def tick_until_executed():
    """The every-second ``until_executed`` periodic entry ``soak-tick-ue``: each run
    takes a good part of its second, so the running lock is often held."""
    with trace.run("tick_ue"):
        time.sleep(random.uniform(0.1, 0.4))


def backoff(retry_count):
    """RETRY_BACKOFF of the soak's workers: retries come back within a couple of seconds."""
    return random.uniform(0.5, 1.5)
