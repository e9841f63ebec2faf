"""Jobs the test suite and the benchmark run in real worker processes.

Runs are counted in a Redis hash (``<prefix>:test:runs``, field = a token or the jid),
so a test can check that each job ran exactly once.
"""

import asyncio
import os
import signal
import threading
import time

from cogworker_django import current_job, job
from cogworker_django.store import connection, keys


def runs_key() -> str:
    return f"{keys.prefix()}:test:runs"


def times_key() -> str:
    return f"{keys.prefix()}:test:times"


def _count(token=None):
    token = token or current_job()["jid"]
    connection.get_client().hincrby(runs_key(), token, 1)


@job
def noop():
    pass


@job(queue="default")
def record(token=None):
    _count(token)


# What grow_memory holds on to: a job that leaks (tests/worker/test_recycle.py).
_held: list[bytes] = []


@job
def grow_memory(mib, token=None):
    """Grows this process's RSS by ``mib`` MiB for good (every page written), as a leak
    in job code would."""
    _held.append(b"\x01" * (int(mib) * 2**20))
    _count(token)


@job(durable=True)
def durable_record(token=None):
    """A job whose every enqueue is durable (an outbox row: tests/durable/test_durable_*.py)."""
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


@job
def takes_anything(*args, **kwargs):
    _count()


@job(retry=2)
def type_error_inside(message="from the body"):
    _count()
    raise TypeError(message)


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


# Hostile RETRY_BACKOFF hooks (tests/worker/test_worker_failure_path.py): filing must survive them.
def backoff_raises(retry_count):
    raise RuntimeError("backoff hook is broken")


def backoff_inf(retry_count):
    return float("inf")


def backoff_nan(retry_count):
    return float("nan")


def backoff_text(retry_count):
    return "soon"


def backoff_negative(retry_count):
    return -5


# Unique jobs (tests/core/test_unique_*.py) --------------------------------------------------------


def timeline_key() -> str:
    return f"{keys.prefix()}:test:timeline"


@job
def timed(seconds, token=None):
    """Stamps its start and end in ``<prefix>:test:timeline`` (fields ``<jid>:start`` and
    ``<jid>:end``, epoch seconds), sleeping ``seconds`` between, then counts its run."""
    conn = connection.get_client()
    jid = current_job()["jid"]
    conn.hset(timeline_key(), f"{jid}:start", time.time())
    time.sleep(seconds)
    conn.hset(timeline_key(), f"{jid}:end", time.time())
    _count(token)


@job
def kill_first_run(token):
    """SIGKILLs its own worker on its first run (runs counted per token, each run's jid
    appended to ``<prefix>:test:runs:<token>:jids``); later runs succeed."""
    conn = connection.get_client()
    conn.rpush(f"{runs_key()}:{token}:jids", current_job()["jid"])
    if conn.hincrby(runs_key(), token, 1) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)


def backoff_2s(retry_count):
    return 2.0


# --- worker and reliability tests (tests/worker/test_worker_*.py, tests/worker/test_reliable_*.py) ---


@job
def count_then_sleep(seconds, token=None):
    """Counts its run first, then sleeps: a run is visible even if it never finishes."""
    _count(token)
    time.sleep(seconds)


@job(retry=False)
def raises_keyboard_interrupt():
    raise KeyboardInterrupt("from a job")


@job
def crash_processor_thread(token=None):
    """Test hook: makes the processor code right after this job raise once in this
    thread (as a bug in it would), so the processor thread dies and must be replaced."""
    import threading

    from cogworker_django.observe import stats

    _count(token)
    thread = threading.current_thread()
    real = stats.incr

    def crash_once(*args, **kwargs):
        if threading.current_thread() is thread:
            stats.incr = real
            raise RuntimeError("processor crash injected by crash_processor_thread")
        return real(*args, **kwargs)

    stats.incr = crash_once


@job
def sleeper(seconds):
    """Stamps its start (``<jid>:start`` in the timeline hash), then only sleeps: it
    touches no Redis at its end, so it succeeds even while Redis is away."""
    jid = current_job()["jid"]
    connection.get_client().hset(timeline_key(), f"{jid}:start", time.time())
    time.sleep(seconds)


# --- periodic jobs (tests/periodic/test_periodic_*.py) ---


def periodic_slots_key() -> str:
    return f"{keys.prefix()}:test:slots"


def periodic_spans_key() -> str:
    return f"{keys.prefix()}:test:spans"


def _periodic_slot() -> str:
    return str((current_job() or {}).get("periodic_slot", "manual"))


@job
def periodic_tick():
    """Counts its runs per periodic slot (``<prefix>:test:slots``, field = the slot), and
    keeps when each slot's run was pushed (``<prefix>:test:slots:pushed``)."""
    conn = connection.get_client()
    conn.hincrby(periodic_slots_key(), _periodic_slot(), 1)
    pushed = (current_job() or {}).get("enqueued_at")
    conn.hset(f"{periodic_slots_key()}:pushed", _periodic_slot(), repr(pushed))


@job(retry=False)
def periodic_span(seconds=0.0):
    """Counts its run per slot, appends ``start <jid> <slot> <pid> <epoch>`` to
    ``<prefix>:test:spans``, sleeps, then appends ``end <jid> <epoch>`` best-effort (so
    a run can finish while Redis is away)."""
    import redis

    conn = connection.get_client()
    jid, slot = current_job()["jid"], _periodic_slot()
    conn.hincrby(periodic_slots_key(), slot, 1)
    conn.rpush(periodic_spans_key(), f"start {jid} {slot} {os.getpid()} {time.time()}")
    time.sleep(seconds)
    try:
        conn.rpush(periodic_spans_key(), f"end {jid} {time.time()}")
    except redis.RedisError:
        pass


@job
def periodic_note(*args, **kwargs):
    """Appends its run to ``<prefix>:test:notes`` as JSON: the entry's name and slot (from
    its payload), its arguments, the worker's pid and when it ran (database entries:
    tests/periodic/test_periodic_database*.py)."""
    import json

    job_ = current_job() or {}
    note = {
        "entry": job_.get("periodic"),
        "slot": job_.get("periodic_slot"),
        "args": list(args),
        "kwargs": kwargs,
        "pid": os.getpid(),
        "at": time.time(),
        "jid": job_.get("jid"),
    }
    connection.get_client().rpush(f"{keys.prefix()}:test:notes", json.dumps(note))


@job
def tracked(seconds, token):
    """Counts ``<token>:start`` when it starts and ``<token>:end`` when it finishes."""
    _count(f"{token}:start")
    time.sleep(seconds)
    _count(f"{token}:end")


@job
def tracked_busy(seconds, token):
    """As ``tracked``, but busy on the CPU in pure Python (holding the interpreter lock
    but for its switch interval) until ``seconds`` have passed on the wall clock."""
    _count(f"{token}:start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass
    _count(f"{token}:end")


@job(retry=False)
def tracked_then_fail(seconds, token):
    """As ``tracked``, then fails (filed in dead: once per run that settles)."""
    _count(f"{token}:start")
    time.sleep(seconds)
    _count(f"{token}:end")
    raise RuntimeError(f"{token} failed")


# --- outage and history tests (tests/worker/test_faults_*.py, tests/history/) ---


@job(retry=False)
def sleep_then_fail(seconds, message="failed after sleeping"):
    """Stamps its start (``<jid>:start`` in the timeline hash), sleeps, then raises without
    touching Redis: it fails even while Redis is away (its filing then has to wait)."""
    jid = current_job()["jid"]
    connection.get_client().hset(timeline_key(), f"{jid}:start", time.time())
    time.sleep(seconds)
    raise RuntimeError(message)


@job
def record_where(token):
    """Like record, and also counts the runs per worker pid (``<prefix>:test:pids``)."""
    pipe = connection.get_client().pipeline(transaction=False)
    pipe.hincrby(runs_key(), token, 1)
    pipe.hincrby(f"{keys.prefix()}:test:pids", str(os.getpid()), 1)
    pipe.execute()


# In-process worker tests (tests/worker/test_shutdown_handover.py) --------------------------------
# A run that waits at a gate the test opens: entered[token] is set once the run is in.
gates: dict[str, threading.Event] = {}
entered: dict[str, threading.Event] = {}


def gate(token: str) -> threading.Event:
    entered.setdefault(token, threading.Event())
    return gates.setdefault(token, threading.Event())


@job
def wait_at_gate(token, fail=False):
    g = gate(token)
    entered[token].set()
    g.wait(20)
    _count(token)
    if fail:
        raise RuntimeError(f"{token} failed after the gate")


# Workflows (tests/workflows/test_workflows_*.py) ------------------------------------------------------
# Every run leaves a JSON line in <prefix>:test:wf (what ran, with which arguments and
# payload fields), so a test can check what ran, how often and in which order.


def wf_trace_key() -> str:
    return f"{keys.prefix()}:test:wf"


def _wf_trace(kind, **fields):
    import json

    job_ = current_job() or {}
    entry = {
        "kind": kind,
        "jid": job_.get("jid"),
        "bid": job_.get("bid"),
        "callback_of": job_.get("callback_of"),
        "event": job_.get("callback_event"),
        **fields,
    }
    connection.get_client().rpush(wf_trace_key(), json.dumps(entry))


@job
def wf_member(token, result=None):
    _wf_trace("member", token=token)
    return token if result is None else result


@job(retry=3)
def wf_fail_first(token):
    """Fails its first run (per token), then succeeds."""
    conn = connection.get_client()
    tries = conn.hincrby(f"{keys.prefix()}:test:wf:tries", token, 1)
    _wf_trace("fail_first", token=token, tries=tries)
    if tries == 1:
        raise RuntimeError(f"{token}: first run fails")
    return token


@job(retry=False)
def wf_dead_unless_fixed(value):
    """Ends in dead (no retries) until <prefix>:test:wf:fixed is set; then returns value."""
    fixed = connection.get_client().get(f"{keys.prefix()}:test:wf:fixed")
    _wf_trace("dead_unless_fixed", value=value, fixed=bool(fixed))
    if not fixed:
        raise RuntimeError("not fixed yet")
    return value


@job
def wf_add(x, y):
    _wf_trace("add", x=x, y=y)
    return x + y


@job(retry=3)
def wf_double_flaky(x, token):
    """Doubles x; fails its first run (per token)."""
    conn = connection.get_client()
    tries = conn.hincrby(f"{keys.prefix()}:test:wf:tries", token, 1)
    _wf_trace("double_flaky", x=x, tries=tries)
    if tries == 1:
        raise RuntimeError("first run fails")
    return x * 2


@job
def wf_square(x):
    _wf_trace("square", x=x)
    return x * x


@job
def wf_callback(*args, **kwargs):
    _wf_trace("callback", args=list(args), kwargs=kwargs)


@job
def wf_not_json():
    return {1, 2}


@job
def wf_chaos_member(label, i, seconds=0.0):
    """A member of the chaos test's batches: counts its runs (a run a kill cut short
    counts too), marks itself done (a set per batch)."""
    conn = connection.get_client()
    conn.hincrby(f"{keys.prefix()}:test:chaos:runs", f"{label}:{i}", 1)
    if seconds:
        time.sleep(seconds)
    conn.sadd(f"{keys.prefix()}:test:chaos:done:{label}", i)


@job
def wf_chaos_callback(label, event, size):
    """A chaos test callback: records its run, and whether its batch was finished then."""
    conn = connection.get_client()
    done = conn.scard(f"{keys.prefix()}:test:chaos:done:{label}")
    job_ = current_job()
    conn.rpush(
        f"{keys.prefix()}:test:chaos:callbacks",
        f"{label}|{event}|{job_['jid']}|{done}|{size}",
    )


# Observability (tests/worker/test_worker_command.py): a run that logs through an app's logger.
@job
def logs_lines(token, fail=False):
    import logging

    logging.getLogger("testapp.work").info("working on %s", token)
    if fail:
        raise ValueError(f"{token} went wrong")


# Benchmarks (scripts/measure-drain) -----------------------------------------------------
@job
def bench_incr():
    """One round trip to Redis, as a real job does some I/O: counts itself done."""
    connection.get_client().incr(f"{keys.prefix()}:bench:done")


@job
def bench_stamp(token):
    """The trickle scenario's job (bench/trickle.py): stamps when it started, in the
    bench's key (no prefix: the key every system of the bench stamps)."""
    connection.get_client().hset("bench:started", token, time.time())


@job
def bench_wait_incr(ms):
    """Waits ``ms`` milliseconds (a call to a slow service), then counts itself done."""
    time.sleep(ms / 1000)
    connection.get_client().incr(f"{keys.prefix()}:bench:done")


# Job controls (tests/controls/test_controls_*.py) -------------------------------------------------


@job(timeout=1, retry=False)
def spin_forever():
    """Pure Python that never returns: stopped by its timeout. Stamps its start and the
    interruption (its own clock, ``test:times``, under its jid)."""
    jid = current_job()["jid"]
    started = time.time()
    _count()
    try:
        while True:
            pass
    except BaseException:
        stamps = {f"{jid}:started": repr(started), f"{jid}:interrupted": repr(time.time())}
        connection.get_client().hset(times_key(), mapping=stamps)
        raise


@job(timeout=1, retry=False)
def spin_then_finally_raises():
    """Stopped by its timeout; its finally raises as the timeout unwinds it."""
    _count()
    try:
        while True:
            pass
    finally:
        raise RuntimeError("cleanup failed")


@job(timeout=1, retry=False)
async def async_finally_raises():
    """Cancelled by its timeout; its finally raises as the cancellation unwinds it."""
    _count()
    try:
        await asyncio.sleep(3600)
    finally:
        raise RuntimeError("async cleanup failed")


@job(timeout=1, retry=False)
def sleep_in_c(seconds=60):
    """Stuck in a C call the timeout's exception can't reach: abandoned after the grace."""
    _count()
    time.sleep(seconds)
    _count("sleep_in_c-returned")


@job(timeout=1, retry=False)
async def async_forever():
    _count()
    await asyncio.sleep(3600)


@job(timeout=30)
def quick_with_timeout(token=None):
    _count(token)


@job(expires_in=2)
def expiring(token=None):
    _count(token)


@job(limits=["test-pair"])
def limited_pair(seconds, token=None):
    """Stamps its start and end like ``timed``, inside the test-pair concurrency limiter."""
    conn = connection.get_client()
    jid = current_job()["jid"]
    conn.hset(timeline_key(), f"{jid}:start", time.time())
    time.sleep(seconds)
    conn.hset(timeline_key(), f"{jid}:end", time.time())
    _count(token)


@job(limits=["test-rate"])
def limited_rate(token=None):
    connection.get_client().hset(timeline_key(), f"{current_job()['jid']}:start", time.time())
    _count(token)


@job(limits=["test-pair"], timeout=2, retry=False)
def limited_stuck_in_c(seconds):
    """Inside the test-pair limiter, stuck in a C call (``time.sleep``) the timeout's
    exception can't reach, so the watchdog abandons it while its body is still inside.
    Stamps ``start``, and ``end`` = start + seconds up front: the body is inside for at
    least that long (once the sleep returns the pending JobTimeout can land at any line,
    so a stamp written after it is not certain to be written)."""
    conn = connection.get_client()
    jid = current_job()["jid"]
    started = time.time()
    conn.hset(timeline_key(), mapping={f"{jid}:start": started, f"{jid}:end": started + seconds})
    time.sleep(seconds)


@job(limits=["test-pair"])
def limited_kill_first_run(token):
    """Holding a test-pair lease, kills its own worker process on its first run only."""
    if connection.get_client().hincrby(runs_key(), token, 1) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)


@job(retry=False)
def cooperative_cancel(token=None):
    """Runs until cancelled, checking cancelled() (and check_cancelled()) as it goes."""
    from cogworker_django import cancelled, check_cancelled

    _count(token)
    deadline = time.time() + 60
    while time.time() < deadline:
        if cancelled():
            _count(f"{token}-saw-cancel")
            check_cancelled()
        time.sleep(0.05)


@job(retry=False)
def ignores_cancel(token=None):
    """Never checks: the worker interrupts it after CANCEL_GRACE. Records when the
    interruption came (its own clock, ``test:times``)."""
    _count(token)
    deadline = time.time() + 60
    try:
        while time.time() < deadline:
            time.sleep(0.05)
    except BaseException:
        connection.get_client().hset(times_key(), f"{token}:interrupted", repr(time.time()))
        raise


# Redis Cluster failover (tests/store/test_store_workers.py) ----------------------------------


@job
def tally_elsewhere(url, key, token, seconds=0.0):
    """Counts its run in a Redis that is not the cluster under test (the test kills the
    master holding the jobs: counts kept there could go with it)."""
    import redis

    time.sleep(seconds)
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
    try:
        client.hincrby(key, token, 1)
    finally:
        client.close()


# The async jobs (tests/worker/test_async_*.py), the argument types' (tests/core/test_argument_types*.py),
# results, progress and retry control (tests/core/test_results*.py, test_retry_control.py).
from . import argument_jobs, async_jobs, result_jobs  # noqa: E402, F401
