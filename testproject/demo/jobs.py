"""Demo jobs: one that succeeds, one that takes its time, one that always fails.

`make demo` calls `enqueue_demo()` and starts a worker; watch the jobs in the admin
(Cogworker section) after `make runserver`.
"""

import logging
import time

from django.utils import timezone

from cogworker_django import job

logger = logging.getLogger(__name__)


@job
def add(a, b):
    """Succeeds: returns the sum."""
    total = a + b
    logger.info("add(%r, %r) = %r", a, b, total)
    return total


@job
def slow(seconds=3):
    """Sleeps, so it shows up under Busy in the admin."""
    logger.info("slow: sleeping %s s", seconds)
    time.sleep(seconds)
    return seconds


@job(retry=2)
def flaky():
    """Always fails: two retries (see Retries in the admin), then the dead set."""
    raise ValueError("flaky always fails: watch it go to Retries, then Dead")


@job
def heartbeat_report():
    """Run every minute by the periodic schedule in settings.COGWORKER_PERIODIC."""
    logger.info("heartbeat_report: periodic demo entry ran at %s", timezone.now().isoformat())


def enqueue_demo():
    """Enqueue a bit of everything and print what was enqueued."""
    for i in range(5):
        print(f"enqueued add({i}, {i * 10}) -> {add.enqueue(i, i * 10)}")
    for seconds in (3, 5):
        print(f"enqueued slow({seconds}) -> {slow.enqueue(seconds)}")
    print(f"enqueued flaky() -> {flaky.enqueue()} (fails; retried twice, then dead)")
    print(f"enqueued add(1, 2) in 10 s -> {add.enqueue_in(10, 1, 2)}")


def demo_backoff(retry_count):
    """The demo's retry delay (seconds), so flaky reaches the dead set within a minute.
    Set by `make demo`; the built-in backoff starts at about 16 s and grows fast."""
    return 5 * retry_count
