"""Pushing jobs: now (LPUSH), later (ZADD to the schedule), or many in one round trip.

(Over 400 lines: every kind of push (single, bulk, plain, scheduled, a claimed slot's
final write) and the listing they share are decided here, side by side.)

Rule 1: the push is the one write that matters. It goes first; the ``P:queues``
listing rides in the same non-transactional pipeline but its failure is only logged,
never raised (a raised push is retried by its caller and queues the job twice). The
listing is refreshed at most once a minute per queue per process, so a single
``enqueue`` costs one round trip.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import redis
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .. import conf
from ..store import bell, connection, errors, homes, keys, listing, scripts
from ..store.errors import CogworkerError
from . import middleware, route, testrun, unread

log = logging.getLogger("cogworker_django")

# Values per LPUSH/ZADD in a bulk push: large enough to amortise, small enough to keep
# Redis responsive to other clients.
BULK_CHUNK = 1000

# Where pushes go instead of Redis in the test modes: the sink a ``testing.fake()`` or
# ``inline()`` block set, else the one installed for the ``TESTING`` setting's mode.
# ``testing`` installs them (imported by the app's ready()); this module never imports it.
Sink = Callable[[dict[str, Any]], Any]
_diverter: Sink | None = None
_mode_sinks: dict[str, Sink] = {}


def set_diverter(fn: Sink | None) -> Sink | None:
    """Send every push to ``fn`` (None: back to Redis); returns the previous one."""
    global _diverter
    previous, _diverter = _diverter, fn
    return previous


def install_mode_sink(mode: str, fn: Sink) -> None:
    _mode_sinks[mode] = fn


def active_sink() -> Sink | None:
    """The sink pushes go to now, or None when they go to Redis: a ``testing.fake()`` or
    ``inline()`` block's; Redis when a test asked for it (testrun.real_redis); the
    ``TESTING`` setting's mode; "fake" in a test run that set none (testrun.py)."""
    if _diverter is not None:
        return _diverter
    _check_installed()
    if testrun.real_redis_asked():
        return None
    mode = conf.get().TESTING
    if mode is None:
        mode = testrun.default_mode()
    if mode and mode != "redis":
        sink = _mode_sinks.get(mode)
        if sink is None:
            raise RuntimeError(
                f"TESTING={mode!r} needs cogworker_django.testing imported (add "
                "'cogworker_django' to INSTALLED_APPS: its ready() does it)"
            )
        return sink
    return None


class NotInstalled(CogworkerError, ImproperlyConfigured):
    """An enqueue in a project whose INSTALLED_APPS lacks ``cogworker_django``: no worker
    of it could run the job, and its test modes and checks are off."""


# True once INSTALLED_APPS was seen to hold the app (forgotten when the setting changes).
_installed = False


def _check_installed() -> None:
    global _installed
    if _installed:
        return
    if not _listed():
        raise NotInstalled(
            "cogworker_django is not in INSTALLED_APPS: add it, or no `manage.py cogworker` "
            "exists to run this job (and the TESTING modes, the settings' validation and "
            "the system checks are off)."
        )
    _installed = True


def _listed() -> bool:
    """Whether the project installs the app: judged from ``INSTALLED_APPS`` (the name, or
    an AppConfig path under the package), not only from the app registry, which a
    ``TransactionTestCase``'s ``available_apps`` narrows for a test (the app is still the
    project's, and its workers still run the job)."""
    from django.apps import apps
    from django.conf import settings

    for entry in getattr(settings, "INSTALLED_APPS", ()):
        if isinstance(entry, str) and (
            entry == "cogworker_django" or entry.startswith("cogworker_django.")
        ):
            return True
    # An AppConfig of the project's own (any path) whose name is the package.
    return apps.is_installed("cogworker_django")


@receiver(setting_changed)
def _forget_installed(*, setting: str, **kwargs: Any) -> None:
    global _installed
    if setting == "INSTALLED_APPS":
        _installed = False
    if setting in ("COGWORKER", "TASKS"):
        unread.forget()


class FinalWrite(Protocol):
    """The last step of a claimed periodic slot's push (periodic/claims.py: the job is
    pushed and its claim record removed in one script). ``plain(queue, where)`` writes an
    immediate job where :func:`route.destination` says (an LPUSH or ZADD otherwise); a
    unique job's lock script takes ``claim`` as extra KEYS/ARGV (unique.push);
    ``other()`` is called before any other path (a batch member, a test-mode sink, a
    scheduled push). Each returns False when nothing was written (the push then returns
    None)."""

    def plain(self, queue: str, where: route.Destination) -> bool: ...

    def other(self) -> bool: ...

    def claim(self) -> tuple[str, str, str]: ...

    def unique_result(self, result: int) -> None: ...


def push(
    job: dict[str, Any], final: FinalWrite | None = None, encoded: str | None = None
) -> str | None:
    """Push one job through the client middleware; returns its jid, or None if a
    middleware stopped it or it is a duplicate of a unique job. A key of the wrong type
    raises :class:`WrongKeyType`, naming it. ``final``: see :class:`FinalWrite`.
    ``encoded``: the job's payload text as just built (payload.build_encoded), sent as it
    is when nothing changes the job on the way (no client middleware, a plain push)."""
    try:
        if final is None:
            if encoded is not None and not middleware.has_client_middleware():
                return _push_one(job, encoded=encoded)
            return middleware.run_client_chain(job, _push_one)
        return middleware.run_client_chain(job, lambda j: _push_one(j, final))
    except redis.ResponseError as exc:
        named = wrong_key_type(exc, job)
        if named is None:
            raise
        raise named from exc


# Batch members are pushed and counted in one step by the pushers the workflows package
# installs when it is imported (cogworker_django imports it): this module never imports
# workflows, which pushes through this one.
_member_pushers: dict[str, Callable[..., Any]] = {}


def install_member_pushers(one: Callable[..., Any], many: Callable[..., Any]) -> None:
    _member_pushers["one"], _member_pushers["many"] = one, many


def _member_pusher(which: str) -> Callable[..., Any]:
    pusher = _member_pushers.get(which)
    if pusher is None:
        raise RuntimeError("a batch member needs cogworker_django.workflows imported")
    return pusher


def _push_one(
    job: dict[str, Any], final: FinalWrite | None = None, encoded: str | None = None
) -> str | None:
    """The last step of a push (after the client middleware). With ``final`` (a claimed
    periodic slot, :class:`FinalWrite`) the write that can carry the claim record's
    removal does; any other path marks the record first and then pushes as usual.
    ``encoded`` (see :func:`push`) is sent only by a plain LPUSH of a job built a moment
    ago in the same call, whose ``enqueued_at`` is then the build's."""
    now = time.time()
    if final is not None and not _final_write_carries(job, now):
        if not final.other():
            return None
        final = None
    if job.get("bid"):
        return _member_pusher("one")(job)  # a batch member: pushed and counted in one step
    divert = active_sink()
    if divert is not None:
        return divert(job)
    where = route.destination(job, now, encoded if final is None else None)
    unread.check(where.queue)  # a queue nobody reads (a typo?): one warning per name
    if where.kind == "unique":
        from . import unique

        pushed = unique.push(job, final)
        if pushed is not None:
            _list_apart(where.queue)
        return pushed
    if final is not None:  # the claimed slot's final write (a queue's list or zset)
        return job["jid"] if final.plain(where.queue, where) else None
    _write(connection.get_client(), where)
    return job["jid"]


def _final_write_carries(job: dict[str, Any], now: float) -> bool:
    """Whether a claimed slot's final write can be this job's own push. With a home per
    queue a unique job's lock (its queue's home) and the claim record (the prefix's) are
    in two slots: no one script holds both, so the record is marked first
    (docs/cluster.md). A plain push goes through the outbox (periodic/claims.py)."""
    unique_apart = homes.Home.of_job(job).crosses(homes.Home.root()) and (
        job.get("unique") in route.LOCKED_AT_PUSH
    )
    return not (
        job.get("bid") or active_sink() is not None or route.is_scheduled(job, now) or unique_apart
    )


def _write(conn: Any, where: route.Destination) -> None:
    """The write of a single push (LPUSH to a list, ZADD to a zset), and the queue's
    listing when the destination lists it and this process has not lately: one round
    trip. The write's failure raises; the listing's is reported (rule 1). A push that
    found its queue empty (the LPUSH's reply is 1), or a job added to a priority zset,
    rings the queue's doorbell after it (store/bell.py: an idle worker starts it now)."""

    def write(target: Any) -> Any:
        if where.score is None:
            return target.lpush(where.key, where.value)
        return target.zadd(where.key, {where.value: where.score})

    if where.listed and listing.due(where.queue):
        written = _write_and_list(conn, where.queue, write)
    else:
        written = write(conn)
    if where.kind == "list" and written == 1 or where.kind == "zset" and written:
        bell.ring(conn, (where.queue,))


def _write_and_list(conn: Any, queue: str, write: Any) -> Any:
    """``write`` (queued on a pipeline) and the queue's listing, in one round trip; the
    write's failure raises, the listing's is reported (listing.report). Returns the
    write's reply."""
    pipe = conn.pipeline(transaction=False)
    write(pipe)
    listing.add(pipe, queue)
    written, listed = pipe.execute(raise_on_error=False)
    if isinstance(written, Exception):
        listing.forget(queue)
        raise written
    listing.report(listed, queue)
    return written


def _list_apart(queue: str) -> None:
    """With a home per queue, a push whose script could not list its queue (P:queues is
    in another slot) lists it here, best effort (a failure is reported, never raised:
    the job is in)."""
    if not (homes.Home.of_queue(queue).lists_apart() and listing.due(queue)):
        return
    try:
        listed: Any = listing.add(connection.get_client(), queue)
    except Exception as exc:  # noqa: BLE001 - reported by _check_listing
        listed = exc
    listing.report(listed, queue)


class WrongKeyType(CogworkerError, redis.ResponseError):
    """Redis refused a push (WRONGTYPE) because a key it writes holds another type (a
    key someone SET by hand, say). ``keys`` maps each such key to (its type, the type
    it must hold). The key guard of a running worker moves it aside within
    ``KEYGUARD_INTERVAL``; then the push works again."""

    def __init__(self, message: str, found: dict[str, tuple[str, str]]) -> None:
        super().__init__(message)
        self.keys = found


def _push_keys(job: dict[str, Any]) -> dict[str, str]:
    """Every key a push of ``job`` may write, with the type it must hold."""
    queue = job.get("queue")
    found = {keys.queues(): "set"}
    if isinstance(queue, str) and queue:
        home = keys.home_of(queue)
        found[keys.schedule(home)] = "zset"
        found[keys.queue(queue)] = "list"
        found[keys.priority_queue(queue)] = "zset"
        digest = job.get("unique_digest")
        if job.get("unique") and isinstance(digest, str) and digest:
            found[keys.unique(digest, home)] = "string"
    return found


def wrong_key_type(exc: BaseException, job: dict[str, Any]) -> WrongKeyType | None:
    """A :class:`WrongKeyType` naming the keys of the wrong type behind ``exc`` (a
    WRONGTYPE reply to a push of ``job``), or None when ``exc`` is something else."""
    if isinstance(exc, (WrongKeyType, BulkPushError)) or "WRONGTYPE" not in errors.safe_str(exc):
        return None
    wanted = _push_keys(job)
    found: dict[str, tuple[str, str]] = {}
    try:
        pipe = connection.get_client().pipeline(transaction=False)
        for key in wanted:
            pipe.type(key)
        for (key, expected), actual in zip(wanted.items(), pipe.execute(), strict=True):
            actual = connection.text(actual)
            if actual not in ("none", expected):
                found[key] = (actual, expected)
    except redis.RedisError:
        pass  # the message below still says what happened
    interval = conf.get().KEYGUARD_INTERVAL
    queue = job.get("queue")
    aside = keys.quarantine_root(
        keys.home_of(queue) if isinstance(queue, str) and queue else keys.root()
    )
    what = (
        "; ".join(f"{k} holds a {a}, not a {e}" for k, (a, e) in found.items())
        if found
        else "one of " + ", ".join(wanted) + " holds the wrong type"
    )
    return WrongKeyType(
        f"Redis refused to push {job.get('func')} (WRONGTYPE): {what}. The key guard of a "
        f"running worker moves a key of the wrong type aside (into {aside}"
        f"..., see the admin's Quarantined keys) within KEYGUARD_INTERVAL ({interval:g} s); "
        "the push works again after that.",
        found,
    )


class BulkPushError(CogworkerError, redis.ResponseError):
    """Redis refused some writes of a bulk push (a key of the wrong type), while the
    others went through (a ``ResponseError``, as a single push would raise): ``results`` holds the jid of every job that was pushed and None
    for the others, so a caller can retry just those (retrying the whole call would
    queue the pushed ones twice: rule 1). ``errors`` are Redis's replies."""

    def __init__(self, results: list[str | None], errors: list[Exception], wanted: int) -> None:
        self.results = results
        self.errors = errors
        pushed = sum(r is not None for r in results)
        super().__init__(
            f"{wanted - pushed} of {wanted} jobs were not pushed ({errors[0]}); the other "
            f"{pushed} were: see .results for which"
        )


def push_many(
    jobs: Iterable[dict[str, Any]], encoded: list[str | None] | None = None
) -> list[str | None]:
    """Push many jobs in one round trip; the result holds each job's jid, or None
    where a middleware stopped it or it was a duplicate of a unique job. ``encoded``:
    each job's payload text as just built, by position (see :func:`push`)."""
    if middleware.client_middleware():
        encoded = None  # a middleware may change a job on the way
        prepared: list[dict[str, Any] | None] = []
        for job in jobs:
            kept: list[dict[str, Any]] = []
            middleware.run_client_chain(job, functools.partial(_keep, kept))
            prepared.append(kept[0] if kept else None)
    else:
        prepared = list(jobs)
    if any(j is not None and j.get("bid") for j in prepared):
        # batch members: pushed and counted in one step
        return _member_pusher("many")(prepared, _push_prepared)
    return _push_prepared(prepared, encoded)


def push_plain(queue: str, jids: list[str], texts: list[str]) -> list[str | None]:
    """Push the payload texts of plain jobs to ``queue`` in one round trip: what
    :func:`push_many` does for jobs that wait on the queue's list (not scheduled, no
    unique lock, no priority, no batch), without a dict per job. The caller has checked
    that nothing else applies (no client middleware, no test-mode sink: jobs.py)."""
    if not texts:
        return []
    unread.check(queue)
    pipe = connection.get_client().pipeline(transaction=False)
    carried = _lpush_chunks(pipe, keys.queue(queue), texts, range(len(texts)))
    listing.add(pipe, queue)
    results = pipe.execute(raise_on_error=False)
    out: list[str | None] = list(jids)
    refused = _refused_writes(out, carried, results)
    listing.report(results[-1], queue)
    if results[0] == min(len(texts), BULK_CHUNK):  # the queue was empty: wake a worker
        bell.ring(connection.get_client(), (queue,))
    if refused:
        raise BulkPushError(out, refused, len(texts))
    return out


def _lpush_chunks(
    pipe: Any, key: str, values: Sequence[str], positions: Sequence[int]
) -> list[Sequence[int]]:
    """Queue LPUSHes of ``values`` to ``key`` on ``pipe``, BULK_CHUNK values each; returns
    the positions (in the caller's list of jobs) each LPUSH carries, for
    :func:`_refused_writes`."""
    carried: list[Sequence[int]] = []
    for start in range(0, len(values), BULK_CHUNK):
        pipe.lpush(key, *values[start : start + BULK_CHUNK])
        carried.append(positions[start : start + BULK_CHUNK])
    return carried


def _refused_writes(
    out: list[str | None], carried: Sequence[Iterable[int]], results: list[Any]
) -> list[Exception]:
    """Redis's refusals among a bulk push's ``results``; the jobs each refused write
    carried (by position, ``carried``) are set to None in ``out``."""
    refused: list[Exception] = []
    for indices, result in zip(carried, results, strict=False):
        if isinstance(result, Exception):
            refused.append(result)
            for i in indices:
                out[i] = None
    return refused


def _keep(kept: list[dict[str, Any]], job: dict[str, Any]) -> str:
    # The end of push_many's client chain: the job as the middleware left it.
    kept.append(job)
    jid: str = job["jid"]
    return jid


def _push_prepared(
    prepared: list[dict[str, Any] | None], encoded: list[str | None] | None = None
) -> list[str | None]:
    divert = active_sink()
    if divert is not None:
        return [divert(j) if j is not None else None for j in prepared]
    bulk = _Bulk(time.time(), encoded)
    for i, job in enumerate(prepared):
        if job is not None:
            unread.check(job.get("queue"))
            bulk.add(i, job)
    conn = connection.get_client()
    pipe = conn.pipeline(transaction=False)
    carried = bulk.write(pipe)
    return bulk.read(prepared, carried, scripts.execute(pipe, conn, raise_on_error=False))


class _Bulk:
    """One bulk push: its jobs sorted by where they go, written in one pipeline, the
    replies read back. What each write carries is kept by position in the caller's list,
    so that a write refused by Redis (a key of the wrong type) is reported for exactly
    the jobs it held."""

    def __init__(self, now: float, encoded: list[str | None] | None) -> None:
        self.now = now
        self.encoded = encoded
        self.lists: dict[str, list[tuple[int, str]]] = {}  # list key -> (index, payload)
        # Priority zsets and schedules: key -> (index, payload, score)
        self.zsets: dict[str, list[tuple[int, str, float]]] = {}
        self.unique: list[tuple[int, dict[str, Any]]] = []  # pushed by unique's script
        self.queues: set[str] = set()  # listed in P:queues with the writes
        self.queue_of: dict[str, str] = {}  # list or priority zset key -> its queue
        # (reply index, queue, values) of each queue's first write: a reply equal to the
        # values written found the queue empty, so its doorbell is rung (store/bell.py).
        # (None for a priority zset: any member added rings.)
        self.firsts: list[tuple[int, str, int | None]] = []

    def add(self, i: int, job: dict[str, Any]) -> None:
        where = route.destination(job, self.now, self.encoded[i] if self.encoded else None)
        if where.kind == "unique":
            self.unique.append((i, job))
            return
        if where.listed:
            self.queues.add(where.queue)
        if where.score is None:
            self.lists.setdefault(where.key, []).append((i, where.value))
        else:
            self.zsets.setdefault(where.key, []).append((i, where.value, where.score))
        if where.kind in ("list", "zset"):
            self.queue_of[where.key] = where.queue

    def write(self, pipe: Any) -> list[Sequence[int]]:
        """Queue every write on ``pipe``; returns the positions each LPUSH/ZADD carries
        (the unique jobs' scripts and the listing follow them, in that order)."""
        carried: list[Sequence[int]] = []
        for key, entries in self.lists.items():
            self.firsts.append((len(carried), self.queue_of[key], min(len(entries), BULK_CHUNK)))
            carried += _lpush_chunks(pipe, key, [d for _, d in entries], [i for i, _ in entries])
        for key, members in self.zsets.items():
            if key in self.queue_of:  # a priority zset (not a schedule): any add rings
                self.firsts.append((len(carried), self.queue_of[key], None))
            for start in range(0, len(members), BULK_CHUNK):
                zchunk = members[start : start + BULK_CHUNK]
                pipe.zadd(key, {data: score for _, data, score in zchunk})
                carried.append([i for i, _, _ in zchunk])
        if self.unique:
            from . import unique

            for _i, job in self.unique:
                unique.queue_push(pipe, job)
        if self.queues:
            listing.add(pipe, *self.queues)
        return carried

    def read(
        self,
        prepared: list[dict[str, Any] | None],
        carried: list[Sequence[int]],
        results: list[Any],
    ) -> list[str | None]:
        out = [job["jid"] if job is not None else None for job in prepared]
        refused = _refused_writes(out, carried, results)
        empty = [
            q
            for at, q, n in self.firsts
            if results[at] == n or n is None and isinstance(results[at], int) and results[at]
        ]
        if self.unique:
            from . import unique

            for (i, job), result in zip(self.unique, results[len(carried) :], strict=False):
                if isinstance(result, Exception):
                    refused.append(result)
                    out[i] = None
                else:
                    out[i] = unique.interpret(job, result)
                    if result == unique.PUSHED_ONTO_EMPTY:
                        empty.append(job["queue"])
        if empty:  # queues that were empty: an idle worker starts their jobs now
            bell.ring(connection.get_client(), dict.fromkeys(empty))
        if self.queues:
            listing.report(results[-1], *sorted(self.queues))
        if refused:
            raise BulkPushError(out, refused, sum(j is not None for j in prepared))
        return out
