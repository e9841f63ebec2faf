"""Dramatiq with its Redis broker and default middleware (retries, time limit, ...)."""

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.targets import QUEUE, url_for

broker = RedisBroker(url=url_for("dramatiq"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE)
def noop() -> None:
    """Does nothing."""
