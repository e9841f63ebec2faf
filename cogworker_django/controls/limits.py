"""Fleet-wide limiters (``COGWORKER["LIMITS"]``): concurrency leases and rate windows in
Redis, each decision one script (lua/limit_take.lua) for every limiter a run names.

- ``{"concurrency": N}``: a run takes a *lease* in ``P:limit:<name>:leases`` (a zset;
  member ``<token>|<jid>|<job>|<identity>``, unique to the run, so every write is
  owner-checked by construction; score = when it lapses, on Redis's clock). At most N
  leases exist at once. The lease is released when the run ends, refreshed by its
  process's heartbeat while the run goes on (:class:`LeaseRefresher`), freed when orphan
  recovery finds its process dead (:func:`free_leases_of`), and otherwise lapses
  :func:`lease_ttl` after its last refresh (a backstop for processes recovery never
  looks at: basic fetch's).
- ``{"rate": N, "per": S}``: a sliding-window log in ``P:limit:<name>:starts``: a start
  is allowed when fewer than N starts lie in the last S seconds. Exactly the promise
  "at most N starts in any S seconds" (a token bucket allows up to 2N across a window
  boundary), for N entries of memory; a refusal says when the oldest start leaves the
  window, so the job comes back when it can run.

``@job(limits=[...])``: :class:`LimitsMiddleware` takes room before the run. A job over
a limit is rescheduled (``Reschedule``: not a failure, no retry counted, nothing logged),
so its queue keeps flowing, and *parked*: once filed in the schedule (one atomic script
with its ack, as any reschedule), its payload is indexed in ``P:limit:<name>:waiting``.
The limiter waker of every worker process (worker/limit_waker.py) moves the oldest
waiting jobs to their queues as soon as the limiter has room: when a lease is released
(on the releasing thread), when the rate window has room again (it sleeps exactly until
then), and every POLL_INTERVAL otherwise. The schedule score is a fallback (:func:`delay`):
nothing waits for ever if the index or every waker is lost.
``with limit(name, wait=S)`` takes the same room inside any code.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .. import conf
from ..core.middleware import Reschedule
from ..store import codec, connection, errors, keys, scripts
from ..store import runtime as process
from ..store.runtime import HeldLeases
from . import runtime
from .errors import JobCancelled, OverLimit
from .spec import LimitSpec

log = logging.getLogger("cogworker_django")

COMPONENT = "Limiter"
# A job rescheduled while Redis can't answer comes back after this, plus jitter.
RETRY_DELAY = 1.0
# Spreads the jobs rescheduled together, so they do not all come back at the same instant.
JITTER = 1.0
# A refused job waits in the schedule, indexed in its limiter's waiting set; the limiter
# waker moves it to its queue as soon as the limiter has room (worker/limit_waker.py).
# Its schedule score is only the fallback should no waker ever move it (every process
# gone, the index entry lost): this long, times one more for every `limit` jobs ahead of
# it, so however many wait, the fallback brings back about `limit` of them per period.
WAIT_FALLBACK = 60.0
# The longest a blocked limit() sleeps between tries (it also watches cancellation).
BLOCK_SLICE = 0.25

# The token prefix of a lease held by an abandoned run (lua/limit_abandon.lua).
ABANDONED = "abandoned."


def lease_ttl() -> float:
    """How long a lease outlives its last refresh: twice ORPHAN_THRESHOLD, so a live
    process loses none before recovery could judge it dead (rule 13), and at least a
    dozen beats."""
    s = conf.get()
    return max(2 * s.ORPHAN_THRESHOLD, 12 * s.HEARTBEAT_INTERVAL)


def spec(name: str) -> LimitSpec:
    specs = conf.get().LIMITS
    if name not in specs:
        raise ImproperlyConfigured(
            f"unknown limiter {name!r}; COGWORKER['LIMITS'] defines {sorted(specs) or 'none'}"
        )
    return specs[name]


@dataclass
class Lease:
    """Room taken in some limiters by one run (or one ``limit()`` block)."""

    names: tuple[str, ...]
    lease_keys: tuple[str, ...]  # the concurrency limiters' lease zsets
    member: str
    run_key: int | None  # id() of the job dict of the run holding it (None: no run)
    lock: threading.Lock
    released: bool = False


def held() -> HeldLeases:
    """This process's leases, for the heartbeat's refresh and the watchdog (kept by its
    runtime: store/runtime.py)."""
    return process.current().leases


@dataclass(frozen=True)
class Refusal:
    name: str
    wait: float  # seconds until it may have room (0: unknown)


def take(names: list[str] | tuple[str, ...], job: dict[str, Any] | None) -> Lease | Refusal:
    """One decision for every limiter named; raises on Redis errors (callers decide)."""
    specs = [spec(n) for n in dict.fromkeys(names)]
    token = secrets.token_hex(8)
    jid = str((job or {}).get("jid") or "-")
    func = str((job or {}).get("func") or "-").replace("|", "/")
    # The process identity (its runtime's, set at a worker's start by its Controls
    # plugin, worker/plugins.py): recovery frees the leases of a dead one.
    member = f"{token}|{jid}|{func}|{process.current().identity}"
    key_list: list[str] = []
    args: list[Any] = [member, token, repr(lease_ttl()), jid]
    for s in specs:
        key_list += [keys.limit_leases(s.name), keys.limit_starts(s.name)]
        key_list.append(keys.limit_offered(s.name))
        args += [s.concurrency or 0, s.rate or 0, repr(s.per or 0)]
    reply = scripts.run("limit_take", connection.get_client(), key_list, args)
    if int(reply[0]) != 1:
        full = specs[int(reply[1]) - 1]
        wait = _float(reply[2])
        return Refusal(full.name, wait)
    lease = Lease(
        tuple(s.name for s in specs),
        tuple(keys.limit_leases(s.name) for s in specs if s.concurrency),
        member,
        id(job) if job is not None else None,
        threading.Lock(),
    )
    if lease.lease_keys:
        held().add(lease)
    return lease


def _float(value: Any) -> float:
    number = codec.number(value)
    return number if number is not None and number > 0 else 0.0


def release(lease: Lease) -> None:
    """Give the room back (never raises: a lease that can't be released now lapses by
    its TTL, since nothing refreshes it any more)."""
    with lease.lock:  # waits for a refresh in flight: none lands after this
        if lease.released:
            return
        lease.released = True
    held().discard(lease)
    if not lease.lease_keys:
        return
    conn = connection.get_client()

    def zrem() -> None:
        pipe = conn.pipeline(transaction=False)
        for key in lease.lease_keys:
            pipe.zrem(key, lease.member)
        for reply in pipe.execute(raise_on_error=False):
            if isinstance(reply, Exception):
                raise reply

    errors.best_effort(COMPONENT, zrem, f"lease of {', '.join(lease.names)} left to lapse")
    _wake(lease.names, released=True)


def _wake(names: tuple[str, ...], released: bool) -> None:
    # The limiter waker's (worker/limit_waker.py), set on the runtime by the Controls
    # plugin: told a lease was just released (on the releasing thread, so the freed room
    # is offered before that thread fetches again), or a job just parked (it wakes for
    # the window's end).
    hook = process.current().limit_wake
    if hook is not None:
        errors.best_effort(
            COMPONENT, functools.partial(hook, names, released), "waiting jobs left for later"
        )


def abandoned(member: str) -> bool:
    """Is this lease member held by a run the watchdog abandoned?"""
    return member.startswith(ABANDONED)


def keep_for_abandoned_run(run_key: int) -> None:
    """The watchdog abandoned this run: its body is still inside (a C call no exception
    reaches), so its leases stay held, refreshed by the heartbeat, until the body returns
    (the middleware or ``limit()`` block around it releases them then) or its process is
    gone (dead-process freeing). Each is renamed so ``Limits`` shows it as an abandoned
    run's. Never raises: a lease not renamed now is still held and refreshed."""
    for lease in held().of_run(run_key):
        errors.best_effort(
            COMPONENT, functools.partial(_mark_abandoned, lease), "lease not marked abandoned"
        )


def _mark_abandoned(lease: Lease) -> None:
    with lease.lock:  # no refresh or release in between: both use the member
        if lease.released or abandoned(lease.member):
            return
        old, new = lease.member, ABANDONED + lease.member
        scripts.run(
            "limit_abandon",
            connection.get_client(),
            list(lease.lease_keys),
            [old, new, repr(lease_ttl())],
        )
        lease.member = new
        held().renamed(lease, old)


def release_all() -> None:
    """At shutdown: this process's leases, once its runs are settled or handed over."""
    for lease in held().all():
        release(lease)


def delay(refusal: Refusal, ahead: int = 0) -> float:
    """The schedule score's delay of a refused job, ``ahead`` jobs waiting before it: the
    fallback (WAIT_FALLBACK, once more per ``limit`` jobs ahead; at least the window's
    wait), should no waker move it sooner."""
    s = spec(refusal.name)
    per_round = min(n for n in (s.concurrency, s.rate) if n)
    fallback = WAIT_FALLBACK * (1 + ahead // per_round)
    return max(fallback, refusal.wait) + random.uniform(0, JITTER)


def park(name: str, filed: str, done: bool = True) -> None:
    """A refused job is about to be filed (``done`` False) or was filed (True) in the
    schedule as ``filed``: index it in the limiter's waiting set, where the waker finds
    it (the schedule keeps the job itself: whatever happens to the index, the fallback
    score brings it back). Written both times: before, so that a process killed right
    after the filing leaves its job indexed; after, because a waker that looked in
    between dropped a pointer to a job not filed yet. The waker is woken once filed."""
    connection.get_client().zadd(keys.limit_waiting(name), {filed: time.time()})
    if done:
        _wake((name,), released=False)


def waiting(name: str) -> int:
    return int(connection.get_client().zcard(keys.limit_waiting(name)) or 0)


class LimitsMiddleware:
    """Built-in server middleware: the limiters of ``@job(limits=[...])`` around the run.
    A no-op for a job that names none."""

    payload_fields = ("limits",)  # (RunChain skips it for a job that names none)

    def __call__(self, job: dict[str, Any], queue: str, run: Any) -> Any:
        names = job.get("limits")
        if not names:
            return run()
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ImproperlyConfigured(f"{job.get('func')}: limits must be a list of names")
        try:
            taken = take(names, job)
        except ImproperlyConfigured:
            raise
        except Exception as exc:
            if not errors.is_unavailable(exc):
                raise
            # Redis away: try later rather than count a failure (or run unlimited).
            raise Reschedule(RETRY_DELAY + random.uniform(0, JITTER), "Redis unavailable") from exc
        if isinstance(taken, Refusal):
            ahead = 0
            with contextlib.suppress(Exception):  # (a fallback a little early at worst)
                ahead = waiting(taken.name)
            raise Reschedule(
                delay(taken, ahead),
                f"over limit {taken.name!r}",
                on_filed=functools.partial(park, taken.name),
            )
        try:
            return run()
        finally:
            release(taken)


@contextlib.contextmanager
def limit(name: str, wait: float | None = None) -> Iterator[None]:
    """Take room in limiter ``name`` for the block: blocks until there is some, or raises
    ``OverLimit`` after ``wait`` seconds (None: waits as long as it takes). Inside a
    worker run the lease is refreshed by the heartbeat and the wait ends early with
    ``JobCancelled`` if the job is cancelled."""
    spec(name)  # ImproperlyConfigured now, before any wait
    why = None if wait is None else conf.number_problem("wait", wait)
    if why:
        raise ValueError(
            f"limit({name!r}): wait must be a number of seconds >= 0, or None, got {wait!r}: {why}"
        )
    from ..core import jobs

    deadline = None if wait is None else time.monotonic() + wait
    while True:
        taken = take([name], jobs.current_job())
        if isinstance(taken, Lease):
            break
        if runtime.cancelled():
            raise JobCancelled()
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise OverLimit(name, wait)
        pause = min(taken.wait or BLOCK_SLICE, BLOCK_SLICE) * random.uniform(0.5, 1.0)
        if deadline is not None:
            pause = min(pause, max(0.0, deadline - now))
        time.sleep(pause)
    try:
        yield
    finally:
        release(taken)


class LeaseRefresher:
    """On every heartbeat (the worker's Controls plugin): keep this process's leases alive
    while their runs go on (a lease being released waits for a refresh in flight, so none
    is put back after it)."""

    def __call__(self, conn: Any, recovering: bool) -> None:
        ttl = repr(lease_ttl())
        for lease in held().all():
            with lease.lock:
                if lease.released:
                    continue
                try:
                    back = scripts.run(
                        "limit_refresh", conn, list(lease.lease_keys), [lease.member, ttl]
                    )
                except Exception as exc:
                    if errors.is_unavailable(exc):
                        raise
                    log.error("lease %s not refreshed: %s", lease.member, errors.describe(exc))
                    continue
            if back:
                log.warning(
                    "lease of %s put back (it had lapsed or been freed while its run went on)",
                    ", ".join(lease.names),
                )


def free_leases_of(conn: Any, dead_identity: str) -> int:
    """Orphan recovery found ``dead_identity`` dead: free its leases in every limiter."""
    names = list(conf.get().LIMITS)
    if not names:
        return 0
    lease_keys = [keys.limit_leases(n) for n in names]
    freed = int(scripts.run("limit_free", conn, lease_keys, [dead_identity]) or 0)
    if freed:
        _wake(tuple(names), released=True)
    return freed
