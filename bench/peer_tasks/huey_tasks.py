"""Huey with RedisHuey (blocking BRPOP fetch). A task returning None stores no result."""

from huey import RedisHuey

from bench.peer_tasks.counter import count_done
from bench.targets import QUEUE, url_for

huey = RedisHuey(QUEUE, url=url_for("huey"))


@huey.task()
def noop() -> None:
    """Does nothing."""


@huey.task()
def incr() -> None:
    """One Redis round trip: counts itself done."""
    count_done("huey")


@huey.task()
def stamp(token: str) -> None:
    """Stamps when it started (bench/trickle.py)."""
    from bench.peer_tasks.counter import stamp as _stamp

    _stamp("huey", token)
