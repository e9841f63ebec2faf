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


@dramatiq.actor(queue_name=QUEUE)
def stamp(token: str) -> None:
    """Stamps when it started (bench/trickle.py)."""
    from bench.peer_tasks.counter import stamp as _stamp

    _stamp("dramatiq", token)
