"""Celery with the Redis broker, no result backend, default acks (early) and prefetch."""

from celery import Celery

from bench.peer_tasks.counter import count_done
from bench.targets import QUEUE, url_for

app = Celery("bench", broker=url_for("celery"))
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.noop")
def noop() -> None:
    """Does nothing."""


@app.task(name="bench.incr")
def incr() -> None:
    """One Redis round trip: counts itself done."""
    count_done("celery")


@app.task(name="bench.stamp")
def stamp(token: str) -> None:
    """Stamps when it started (bench/trickle.py)."""
    from bench.peer_tasks.counter import stamp as _stamp

    _stamp("celery", token)
