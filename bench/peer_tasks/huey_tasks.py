"""Huey with RedisHuey (blocking BRPOP fetch). A task returning None stores no result."""

from huey import RedisHuey

from bench.targets import QUEUE, url_for

huey = RedisHuey(QUEUE, url=url_for("huey"))


@huey.task()
def noop() -> None:
    """Does nothing."""
