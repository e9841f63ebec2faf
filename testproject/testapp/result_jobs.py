"""Jobs the results, progress and retry-control tests run in real workers
(tests/core/test_results*.py, tests/core/test_retry_control.py). Imported by
``testapp.jobs``, so every worker registers them. Runs and their times are kept under
``<prefix>:test:`` as the other test jobs keep theirs."""

import asyncio
import time

from cogworker_django import Discard, Retry, current_job, job
from cogworker_django.store import connection, keys


def _key(name: str) -> str:
    return keys.prefix() + ":test:" + name


def _note(name: str, value: str = "") -> None:
    conn = connection.get_client()
    conn.rpush(_key(name), value or str(time.time()))


@job
def add(x, y):
    return x + y


@job(result_ttl=3600)
def kept_an_hour(value):
    return value


@job(result_ttl=0)
def keeps_nothing(value):
    return value


@job
def returns_unkeepable():
    return object()


@job
def returns_huge(size):
    return "x" * size


@job(retry=False)
def dies(message="it died"):
    raise RuntimeError(message)


@job
def waits_then_returns(seconds, value):
    time.sleep(seconds)
    return value


@job
def reports_progress(steps, pause=0.0, hold=""):
    """Reports each step; ``hold``: a key it waits on (BLPOP) before its last step, so a
    test reads the progress while it runs."""
    me = current_job()
    for i in range(1, steps + 1):
        me.progress(i, total=steps, message=f"step {i}")
        if pause:
            time.sleep(pause)
        if hold and i == steps - 1:
            connection.get_client().blpop([_key(hold)], timeout=30)
    return steps


@job
async def async_add(x, y):
    await asyncio.sleep(0)
    return x + y


@job
async def async_reports_progress(steps):
    me = current_job()
    for i in range(1, steps + 1):
        me.progress(i, total=steps, message=f"async step {i}")
        await asyncio.sleep(0)
    return steps


@job(retry=False)
async def async_dies():
    raise ValueError("async death")


# Retry control ----------------------------------------------------------------------------


@job(retry=3, retry_in=1)
def retries_in_a_second(token):
    """Fails until its third run; each run's time noted."""
    _note("retry-times:" + token)
    if current_job()["retry_count"] < 2:
        raise ConnectionError("not yet")
    return "third time"


@job(retry=5)
def asks_retry_in(token, seconds):
    _note("ask-times:" + token)
    if current_job()["retry_count"] == 0:
        raise Retry(in_=seconds)
    return "retried"


@job(retry=1)
def asks_retry_forever(token):
    _note("forever:" + token)
    raise Retry(in_=0)


@job(retry=5, retry_on=(ConnectionError,), retry_in=0)
def only_network_errors(token, error):
    _note("network:" + token)
    if error == "connection":
        raise ConnectionError("the network")
    raise ValueError("a bug")


@job
def discards(reason):
    raise Discard(reason)


def _retry_in_by_attempt(attempt, exc):
    return [0, 1][min(attempt, 2) - 1]


@job(retry=3, retry_in=_retry_in_by_attempt)
def callable_retry_in(token):
    _note("callable:" + token)
    raise ConnectionError("again")


def _hostile_retry_in(attempt, exc):
    return float("nan")


@job(retry=1, retry_in=_hostile_retry_in)
def hostile_retry_in(token):
    _note("hostile:" + token)
    raise ConnectionError("again")


@job
def alert(message, *, dead_jid):
    """Notes each run (with its own jid: a run interrupted by a kill runs again, as any
    job does, while a second push would be a second jid)."""
    _note("alerts", f"{message}|{dead_jid}|{current_job()['jid']}")


@job(retry=False, on_dead=alert.s("sync failed"))
def sync_account(account_id):
    raise RuntimeError(f"account {account_id} out of sync")


@job(retry=False, on_dead=alert.s("slow death"))
def dies_slowly(seconds):
    """Sleeps, then dies: a test SIGKILLs the worker around its filing."""
    time.sleep(seconds)
    raise RuntimeError("slow death")


@job(on_dead=alert.s("killer"))
def kills_its_worker():
    """Kills the worker running it (SIGKILL): past MAX_ORPHANINGS, orphan recovery files
    it in dead and pushes its on_dead job."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
