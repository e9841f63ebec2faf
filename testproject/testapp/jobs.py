"""Jobs the test suite and the benchmark run in real worker processes.

Runs are counted in a Redis hash (``<prefix>:test:runs``, field = a token or the jid),
so a test can check that each job ran exactly once.
"""

import asyncio
import os
import signal
import time

from cogworker_django import connection, current_job, job, keys


def runs_key() -> str:
    return f"{keys.prefix()}:test:runs"


def _count(token=None):
    token = token or current_job()["jid"]
    connection.get_client().hincrby(runs_key(), token, 1)


@job
def noop():
    pass


@job(queue="default")
def record(token=None):
    _count(token)


@job
def slow(seconds, token=None):
    time.sleep(seconds)
    _count(token)


@job(retry=2)
def always_fails(message="boom"):
    _count()
    raise ValueError(message)


@job(retry=False)
def fails_once_dead(message="no retry"):
    raise RuntimeError(message)


class BrokenStr(Exception):
    def __str__(self):
        raise RuntimeError("str() of this exception raises")


@job(retry=False)
def raises_broken_str():
    raise BrokenStr()


@job
def kill_own_process():
    _count()
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)


@job
async def async_record(token=None):
    await asyncio.sleep(0.01)
    _count(token)


def fast_backoff(retry_count):
    return 0.2
