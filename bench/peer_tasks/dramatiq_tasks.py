"""Dramatiq with its Redis broker and default middleware (retries, time limit, ...)."""

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.peer_tasks.counter import count_done
from bench.targets import QUEUE, url_for

broker = RedisBroker(url=url_for("dramatiq"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE)
def noop() -> None:
    """Does nothing."""


@dramatiq.actor(queue_name=QUEUE)
def incr() -> None:
    """One Redis round trip: counts itself done."""
    count_done("dramatiq")
