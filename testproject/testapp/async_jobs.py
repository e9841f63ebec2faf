"""Async jobs the tests run in real workers (tests/worker/test_async_*.py), on the worker's
event loop. Imported by ``testapp.jobs``, so every worker registers them.

They share one ``redis.asyncio`` client, made once at import as a user's module would:
it binds to the first event loop that uses it, and every later run must find it usable.
Keys live under ``<prefix>:test:``; runs are counted in ``<prefix>:test:runs`` as the
plain test jobs count theirs.
"""

import asyncio
import os
import threading
import time

import redis.asyncio

from cogworker_django import check_cancelled, current_job, job
from cogworker_django.store import keys

# A pool of a few connections that a thousand coroutines share (as a user's would).
client = redis.asyncio.Redis(
    connection_pool=redis.asyncio.BlockingConnectionPool.from_url(
        os.environ.get("COGWORKER_REDIS_URL", "redis://127.0.0.1:6379/0"),
        max_connections=20,
        timeout=60,
        decode_responses=True,
    )
)

# Raise the peak to the gauge's value if it is higher (one round trip, atomic).
_PEAK = """
local n = redis.call('incr', KEYS[1])
if n > tonumber(redis.call('get', KEYS[2]) or '0') then redis.call('set', KEYS[2], n) end
return n
"""


def key(name: str) -> str:
    return f"{keys.prefix()}:test:{name}"


async def _count(token=None):
    await client.hincrby(key("runs"), token or current_job()["jid"], 1)


@job
async def shared_client(token):
    """One INCR through the shared client (bound to the loop of the first run)."""
    await client.incr(key("shared"))
    await _count(token)


@job
async def gauge_wait(seconds, token):
    """Count itself in a gauge while it waits: the peak is how many ran at once."""
    await client.eval(_PEAK, 2, key("gauge"), key("peak"))
    try:
        await asyncio.sleep(seconds)
    finally:
        await client.decr(key("gauge"))
    await _count(token)


@job
async def all_at_once(n, seconds, token):
    """Counts itself in the gauge, waits until ``n`` are in it (a barrier, up to a
    minute: on a busy machine the first would otherwise be done before the last had
    started), then awaits ``seconds``. The peak is how many ran at once."""
    await client.eval(_PEAK, 2, key("gauge"), key("peak"))
    try:
        for _ in range(1200):
            if int(await client.get(key("gauge")) or 0) >= n:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(seconds)
    finally:
        await client.decr(key("gauge"))
    await _count(token)


@job
async def incr_only():
    """The peers' benchmark job: one INCR through the shared client."""
    await client.incr(key("n"))


@job
async def started_then_waits(seconds, token):
    """Counts its start, waits, counts its end: a run cut short shows as a start only."""
    await client.hincrby(key("starts"), token, 1)
    await asyncio.sleep(seconds)
    await _count(token)


@job(retry=1)
async def async_raises(token):
    await _count(token)
    await asyncio.sleep(0)
    raise ValueError(f"async boom {token}")


@job(retry=False)
async def blocks_the_loop(seconds, token):
    time.sleep(seconds)  # the mistake the warning is for: a blocking call in async def
    await _count(token)


async def _blocks_in_background(seconds, token):
    time.sleep(seconds)  # a blocking call in a task no job run owns
    await _count(token)


_background: set = set()  # the tasks started below, kept until they end


@job(retry=False)
async def starts_a_blocking_task(seconds, token):
    """Returns at once; a task it started blocks the loop afterwards (not a job's run)."""
    task = asyncio.get_running_loop().create_task(_blocks_in_background(seconds, token))
    _background.add(task)
    task.add_done_callback(_background.discard)


@job(retry=False)
async def waits_for_cancel(token):
    """Checks check_cancelled() every 0.1 s; records in ``test:ended`` what ended it: its
    own check ("check") or a cancellation delivered at its await ("await")."""
    await client.hincrby(key("starts"), token, 1)
    for _ in range(600):
        try:
            await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            await client.hset(key("ended"), token, "await")
            raise
        try:
            check_cancelled()
        except BaseException:
            await client.hset(key("ended"), token, "check")
            raise
    await _count(token)


@job(retry=False)
async def deaf_to_cancel(token):
    """Never checks cancelled(): interrupted at its await after CANCEL_GRACE. Stamps its
    start and the interruption (wall clock, ``test:times``)."""
    await client.hset(key("times"), f"{token}:started", repr(time.time()))
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await client.hset(key("times"), f"{token}:interrupted", repr(time.time()))
        raise


@job
async def where_am_i(token):
    """Record the thread it runs on (the event loop's, named "event-loop")."""
    await client.hset(key("threads"), token, threading.current_thread().name)
    await _count(token)


@job(timeout=1, retry=False)
async def times_out(token):
    """Stamps its start and when its time limit's cancellation reached it (wall clock,
    ``test:times``)."""
    await client.hset(key("times"), f"{token}:started", repr(time.time()))
    await client.hincrby(key("starts"), token, 1)
    try:
        await asyncio.sleep(3600)
    finally:
        await client.hset(key("times"), f"{token}:interrupted", repr(time.time()))
        await client.hincrby(key("unwound"), token, 1)  # the cancellation reached it


@job
async def long_first_run(token):
    """Waits an hour on its first run (cut short by a test), and not on a later one."""
    started = await client.hincrby(key("starts"), token, 1)
    try:
        await asyncio.sleep(3600 if started == 1 else 0.01)
    finally:
        await client.hincrby(key("unwound"), token, 1)
    await _count(token)


@job(timeout=1, retry=False)
async def ignores_cancellation(token):
    """Hostile: swallows every cancellation and keeps its slot until the watchdog gives
    up on it (TIMEOUT_GRACE) and files it."""
    await client.hincrby(key("starts"), token, 1)
    for _ in range(100):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await client.hincrby(key("swallowed"), token, 1)


@job(limits=["test-pair"])
async def limited_gauge(seconds, token):
    """At most two at once across the fleet (LIMITS["test-pair"]), measured."""
    await client.eval(_PEAK, 2, key("gauge"), key("peak"))
    try:
        await asyncio.sleep(seconds)
    finally:
        await client.decr(key("gauge"))
    await _count(token)


@job(unique="until_executed")
async def unique_async(token):
    await asyncio.sleep(0.5)
    await _count(token)


_bench_client = None


@job
async def bench_incr_async():
    """scripts/measure-drain --async-concurrency: the peers' async job, one INCR through
    a ``redis.asyncio`` client made by the first run (its default pool)."""
    global _bench_client
    if _bench_client is None:
        _bench_client = redis.asyncio.Redis.from_url(
            os.environ.get("COGWORKER_REDIS_URL", "redis://127.0.0.1:6379/0")
        )
    await _bench_client.incr(f"{keys.prefix()}:bench:done")


@job
async def async_member(token):
    """A batch member (tests/worker/test_async_controls.py): returns its token."""
    await asyncio.sleep(0.01)
    await _count(token)
    return token


@job
async def uses_the_orm(token):
    """Queries the database through ``sync_to_async`` (where Django's async ORM runs
    too: asgiref's thread-sensitive executor), and records whether that thread's
    connection was still open from an earlier run (it must not be: the worker closes
    what a run opened)."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    def query():
        was_open = connection.connection is not None
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return was_open

    was_open = await sync_to_async(query)()
    await client.hset(key("orm"), token, "open" if was_open else "closed")
    await _count(token)
