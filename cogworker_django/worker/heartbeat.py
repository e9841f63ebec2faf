"""The heartbeat: this process's presence and registries, every ``HEARTBEAT_INTERVAL``,
and the admin's signals to it (quiet, stop, cancel) between beats: one thread
(background.Background), which waits for those signals on its pub/sub channel.

(Over 400 lines: the beat, the clearance it keeps for orphan recovery and the signals it
waits for between beats are one thread's duties, kept together.)

Duties, each beat:
- the presence key ``P:process:<id>`` (info, busy, quiet; TTL a few beats): the one
  write that must succeed; if it fails, the beat failed;
- every other write on its own, best-effort (one key of the wrong type fails no beat):
  ``P:processes``, ``P:queues`` (the queues read here, even while empty),
  ``P:live_queues``, the work snapshot, and for reliable fetch ``P:inprogress_ids`` and
  ``P:last_beat`` (Redis ``TIME``; the local clock where ``TIME`` is refused);
- then, each best-effort: the stats flush, pending settlements, deferred lock releases,
  the hooks given to it (the plugins' ``beat``: lock refreshes, limiter lease refreshes,
  the cancel flags of the runs in progress, deferred task results), and the fetch strategy's own step after a beat (reliable fetch
  reconciles its in-progress list with the ledger).

What differs by fetch mode (the registries written, the reconcile, the clean-up at exit)
is the fetch strategy's (fetch.py): nothing here branches on the mode.
The first beat runs synchronously, before any fetch: a process must be visibly alive
before its in-progress list can hold anything.

Each beat also reads Redis's clock (``TIME``, last in the pipeline) for this process's
``Clearance``: the Redis time since which it has seen Redis answer without a break. A
clear stretch starts at a successful beat (the first one, or the first after a break)
and ends at a failed beat or at a gap longer than ``stall_gap`` between two answers
this process recorded (its beats and its orphan passes): Redis stalled (``CLIENT
PAUSE``, ``DEBUG SLEEP``, a slow fork), or this process was starved of CPU. Orphan
recovery judges nobody by time this process could not watch (rule 13, recovery.py).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .. import __version__, conf
from ..core import locks
from ..observe import stats
from ..store import codec, connection, errors, keys, listing, naming, scripts
from .background import Background
from .fetch import FetchStrategy
from .ledger import Ledger
from .settlement import settle_pending


@dataclass(frozen=True)
class Beat:
    """One heartbeat, as the hooks given to the heartbeat (the plugins' ``beat``) see it."""

    conn: Any  # the Redis client the heartbeat used
    recovering: bool  # the first beat after a failed one (Redis was away)


class Pool(Protocol):
    """What the heartbeat reads of the process's processor pool (manager.py)."""

    identity: str
    concurrency: int
    fetcher: FetchStrategy
    ledger: Ledger

    @property
    def quieted(self) -> bool: ...

    def quiet(self) -> None: ...

    def busy_count(self) -> int: ...

    def work_snapshot(self) -> dict[str, str]: ...


# (The pool's ``watchdog``, timeouts.Watchdog, is read with getattr: tools and tests may
# beat for a pool without one.)

log = logging.getLogger("cogworker_django")

# Queue entries no live process read for this long leave P:live_queues.
LIVE_QUEUE_RETENTION = 86400
# How long the signal subscriber waits for a message before it looks at the stop flag
# again: what a stop waits for it at most (ten wake-ups a second cost nothing measurable;
# a second made every stop, and every test's worker, a second longer).
SIGNAL_POLL = 0.1


def presence_ttl(interval: float) -> int:
    # A few beats: a process that stops beating disappears from the admin soon after.
    return max(2, int(interval * 4 + 0.999))


def stall_gap(interval: float) -> float:
    """Two answers further apart than this (Redis clock) mean a break: beats come
    ``interval`` apart, a slow beat or a busy moment adds far less than a whole interval
    plus a second."""
    return 2 * interval + 1.0


class Clearance:
    """The Redis time since which this process has seen Redis answer without a break.

    ``beat(at)`` records a successful beat (its presence written, at Redis time ``at``);
    ``answered(at)`` any other successful read of Redis's clock, and returns the start
    of the clear stretch, or None while there is none; ``broken()`` a failed beat.
    Only a beat starts a stretch: a read answering while writes fail (OOM, a demoted
    master) shows nothing about whether the others can beat. Thread-safe (the heartbeat
    and the poller record answers)."""

    def __init__(self, max_gap: float, since: float | None = None) -> None:
        self.max_gap = max_gap
        self._lock = threading.Lock()
        # ``since`` given: a stretch known to have begun then (tools and tests).
        self._since = since
        self._last: float | None = None
        # Since when this process's own beats (writes) have gone through at most
        # ``max_gap`` apart, and its last one: reads can answer while writes wait (a
        # ``CLIENT PAUSE WRITE``, a demoted master), and the lifeline (recovery.py) judges
        # nobody's beats late by a time its own could not be written either.
        self._beating: float | None = since
        self._last_beat: float | None = None

    @property
    def since(self) -> float | None:
        return self._since

    @property
    def beating_since(self) -> float | None:
        with self._lock:
            return self._beating

    def beat(self, at: float) -> float:
        with self._lock:
            if self._since is None or self._gap(at):
                self._since = at
            prev = self._last_beat
            if self._beating is None or (prev is not None and abs(at - prev) > self.max_gap):
                self._beating = at
            self._last_beat = at
            self._last = at if self._last is None else max(self._last, at)
            return self._since

    def answered(self, at: float) -> float | None:
        with self._lock:
            if self._since is None:
                return None
            if self._gap(at):
                # A break just ended: the next beat starts a new stretch.
                self._since = self._last = None
                return None
            self._last = at if self._last is None else max(self._last, at)
            return self._since

    def broken(self) -> None:
        with self._lock:
            self._since = self._last = self._beating = self._last_beat = None

    def _gap(self, at: float) -> bool:
        last = self._last
        if last is None:
            return False
        # Answers from two threads may land slightly out of order; a clock stepped
        # back by more than a gap counts as a break too.
        return at - last > self.max_gap or last - at > self.max_gap


def redis_seconds(reply: Any) -> float:
    """A ``TIME`` reply as epoch seconds."""
    seconds, micros = reply
    return int(seconds) + int(micros) / 1e6


def _rss_kb() -> int | None:
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Heartbeat(Background):
    name = "heartbeat"

    def __init__(
        self,
        manager: Pool,
        *,
        tag: str = "",
        on_stop_signal: Callable[[], None],
        hooks: Sequence[tuple[str, Callable[[Beat], None]]] = (),
        on_fenced: Callable[[], str] | None = None,
    ) -> None:
        super().__init__()
        self.manager = manager
        # (name, hook): called after each beat's presence write (the worker's plugins:
        # worker/plugins.py); a failure is reported under the name.
        self.hooks = tuple(hooks)
        self.identity = manager.identity
        self.tag = tag
        self.interval = conf.get().HEARTBEAT_INTERVAL
        self.started_at = time.time()
        self._on_stop_signal = on_stop_signal
        # Gives the process a new identity once it was fenced, and returns it (the
        # launcher's; None: it keeps its identity, as an in-process worker does).
        self._on_fenced = on_fenced
        self._beat_failed = False
        # The Redis time of this process's last successful beat (None before the first).
        self._beaten_at: float | None = None
        # Signs of having been taken for dead on the last beat ("stamp", "presence").
        self._signs: set[str] = set()
        # Since when (Redis clock) this process has seen Redis answer without a break:
        # orphan recovery measures others' missed beats from there (rule 13).
        self.clearance = Clearance(stall_gap(self.interval))
        # A run that ends after the process was frozen for longer than a stall gap waits
        # for this heartbeat's next look (a beat, at most an interval away) before it
        # settles, so that a fence lands first (ledger.performed).
        manager.ledger.stale_after = stall_gap(self.interval)
        manager.ledger.stale_wait = 2 * self.interval
        # The admin's signals: a pub/sub connection of its own (rest), and when to try
        # it again after it failed (monotonic).
        self._pubsub: Any = None
        self._channel = ""  # the channel it is subscribed to
        self._pubsub_client: Any = None
        self._subscribe_at = 0.0
        # Why this process is recycling (recycle.py; "" when it isn't), for the admin.
        self.recycling = ""

    # Lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.beat()  # synchronous, raises if Redis is unreachable: see module docstring
        super().start()

    def stop(self) -> None:
        """Stop the thread (never hangs: its wait looks at the stop every SIGNAL_POLL)."""
        super().stop()
        self.join(3)

    def first(self) -> None:
        self.rest(self.interval)  # the first beat was written by start()

    def step(self) -> float:
        self.beat_safely()
        return self.interval

    def last(self) -> None:
        self._close_pubsub()

    def remove_presence(self) -> None:
        conn = connection.get_client()
        try:
            pipe = conn.pipeline(transaction=False)
            pipe.delete(keys.process(self.identity), keys.work(self.identity))
            pipe.srem(keys.processes(), self.identity)
            pipe.execute(raise_on_error=False)
            self.manager.fetcher.forget(conn)
        except Exception as exc:  # noqa: BLE001 - presence expires by its TTL anyway
            errors.report("Heartbeat", exc, "presence not removed at exit")

    # Beats -------------------------------------------------------------------------------

    def beat_safely(self) -> bool:
        try:
            self.beat()
        except Exception as exc:  # noqa: BLE001 - a failed beat is retried next interval
            self._beat_failed = True
            self.clearance.broken()
            self.manager.ledger.looked()  # nothing to learn: runs waiting for it go on
            errors.report("Heartbeat", exc)
            return False
        return True

    def info(self) -> dict[str, Any]:
        s = conf.get()
        return {
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "tag": self.tag,
            "concurrency": self.manager.concurrency,
            "queues": [f"{q.name}:{q.weight}" for q in self.manager.fetcher.queues],
            "fetch": self.manager.fetcher.name,
            "started_at": self.started_at,
            "version": __version__,
            "rss_kb": _rss_kb(),
            "identity": self.identity,
            "prefix": s.PREFIX,
            "recycling": self.recycling,
        }

    def beat(self) -> None:
        conn = connection.get_client()
        ident, ttl = self.identity, presence_ttl(self.interval)
        queue_names = [q.name for q in self.manager.fetcher.queues]
        now = time.time()
        pipe = conn.pipeline(transaction=False)
        pipe.hset(
            keys.process(ident),
            mapping={
                "info": json.dumps(self.info()),
                "busy": self.manager.busy_count(),
                "quiet": "true" if self.manager.quieted else "false",
                "beat": now,
                # The name its connections carry ("" unnamed): the lifeline looks for it
                # in CLIENT LIST (recovery.py).
                "client": naming.current(),
            },
        )
        pipe.expire(keys.process(ident), ttl)
        names = ["process registry", "queue registry", "live queue registry", "live queue pruning"]
        pipe.sadd(keys.processes(), ident)
        listing.add(pipe, *queue_names)
        pipe.zadd(keys.live_queues(), {q: now for q in queue_names})
        pipe.zremrangebyscore(keys.live_queues(), "-inf", now - LIVE_QUEUE_RETENTION)
        snapshot = self.manager.work_snapshot()
        pipe.delete(keys.work(ident))
        names.append("work snapshot")
        if snapshot:
            pipe.hset(keys.work(ident), mapping=snapshot)
            pipe.expire(keys.work(ident), ttl)
            names += ["work snapshot", "work snapshot"]
        names += self.manager.fetcher.beat(pipe)  # reliable: in-progress registry, stamp
        names += self._retired_presence(pipe, ttl)
        pipe.time()  # last: when this beat went through, for the clearance
        results = scripts.execute(pipe, conn, raise_on_error=False)
        for r in results[:2]:
            if isinstance(r, Exception):
                raise r  # the presence key: without it the beat failed
        clock = results[-1]
        if isinstance(clock, Exception) and errors.is_unavailable(clock):
            raise clock
        for name, r in zip(names, results[2:-1], strict=True):
            if isinstance(r, Exception):
                if errors.is_unavailable(r):
                    raise r
                if name == "last-beat stamp":
                    self._stamp_locally(conn)
                else:
                    log.error("Heartbeat: %s not written: %s", name, errors.describe(r))
        recovering = self._beat_failed
        self._beat_failed = False
        # TIME refused (some proxies): this host's clock, as for the stamp.
        at = redis_seconds(clock) if not isinstance(clock, Exception) else time.time()
        self.clearance.beat(at)
        written = dict(zip(names, results[2:-1], strict=True))
        self._look_for_fence(conn, written, at, presence_was_gone=results[0] != 0)
        self.manager.ledger.looked()
        errors.recovered("Heartbeat")
        self._after_beat(conn, recovering)

    def _retired_presence(self, pipe: Any, ttl: int) -> list[str]:
        """The identities this process had before it was fenced, while jobs are left on
        their lists (retired.py): present with this process's connection name, so that
        the lifeline finds those lists at once should this process die."""
        retired = getattr(self.manager.fetcher, "retired", None)
        names: list[str] = []
        for old in retired.identities if retired is not None else ():
            pipe.hset(keys.process(old), "client", naming.current())
            pipe.expire(keys.process(old), ttl)
            names += ["retired identity's presence", "retired identity's presence"]
        return names

    def _look_for_fence(
        self, conn: Any, written: dict[str, Any], at: float, presence_was_gone: bool
    ) -> None:
        """After a beat at ``at`` (Redis clock): fence if its stamp had been dropped
        (beat_stamp.lua returns it negated), on any beat but this process's first, and
        its presence had gone too (the beat's HSET added its fields). Recovery takes only
        a process without a presence, so a stamp gone beside a presence still there was
        dropped by something else (the key guard moving the stamps' hash aside): nobody
        recovered anything. The two signs may show one beat apart (a recoverer's deletes
        landing between this beat's HSET and its stamp): a sign is kept for one beat."""
        previous, self._beaten_at = self._beaten_at, at
        if previous is None:
            self._signs = set()
            return
        stamp = written.get("last-beat stamp")
        signs = {"presence"} if presence_was_gone else set()
        if isinstance(stamp, int) and stamp < 0:
            signs.add("stamp")
        seen, self._signs = signs | self._signs, signs
        if seen == {"presence", "stamp"}:
            self._signs = set()
            errors.best_effort("Heartbeat", lambda: self._fenced(conn, at - previous))

    def _fenced(self, conn: Any, silent: float) -> None:
        """This beat found this process's stamp gone: unless Redis itself started since
        the last beat (a restart that lost its data lost every stamp), orphan recovery
        took this process for dead while it was stalled and moved its jobs to run
        elsewhere. The runs of those jobs are fenced (ledger.fence: they settle and
        release nothing, their copies own that); the process carries on."""
        node = naming.server(conn, keys.last_beat())
        uptime = float(node.info("server").get("uptime_in_seconds", 0))
        if uptime < silent:
            return  # Redis restarted meanwhile: nobody recovered anything
        pool = self.manager
        lists = pool.fetcher.in_progress_lists()
        listed = {codec.raw_text(r) for name in lists for r in conn.lrange(name, 0, -1)}
        fenced = pool.ledger.fence(listed) if lists else []
        old = new = self.identity
        if self._on_fenced is not None:
            try:
                new = self._on_fenced()
            except Exception as exc:  # noqa: BLE001 - its runs are fenced all the same
                errors.report("Heartbeat", exc, "the process keeps its identity")
        log.error(
            "this process (%s) was taken for dead: no beat of its went through for %.0fs "
            "and orphan recovery forgot it; %d running job(s) were recovered to run "
            "elsewhere and are left to their copies (this run of each settles nothing); "
            "carrying on as %s",
            old,
            silent,
            len(fenced),
            new,
        )

    def renamed(self, conn: Any, identity: str) -> None:
        """Carry on as ``identity`` (launcher.py, once fenced): the old identity's place
        in the admin's list goes now; its presence stays while jobs are left on its
        lists (retired.py); the next beat is the new identity's first; the admin's
        signals are read on the new identity's channel."""
        old, self.identity = self.identity, identity
        self._beaten_at = None  # (the pub/sub channel follows in _subscribed)
        pipe = conn.pipeline(transaction=False)
        pipe.srem(keys.processes(), old)
        pipe.delete(keys.work(old))
        # (Should this fail, the old identity's entry expires with its presence.)
        errors.best_effort("Heartbeat", lambda: pipe.execute(raise_on_error=False))

    def _stamp_locally(self, conn: Any) -> None:
        # TIME refused (some proxies): better a skewed stamp than none.
        errors.best_effort(
            "Heartbeat",
            lambda: conn.hset(keys.last_beat(), self.identity, int(time.time())),
            "last-beat stamp",
        )

    def _after_beat(self, conn: Any, recovering: bool) -> None:
        errors.best_effort("Stats flush", lambda: stats.flush(conn))
        pool = self.manager
        if pool.ledger.pending():
            # Same component as the processors' own filing: one outage line, one recovery.
            errors.best_effort("Settle", lambda: settle_pending(pool.ledger, pool.fetcher, conn))
        beat = Beat(conn, recovering)
        for name, hook in self.hooks:
            errors.best_effort(name, functools.partial(hook, beat))
        locks.retry_deferred()
        errors.best_effort("Reconcile", lambda: pool.fetcher.after_beat(conn, pool.ledger))

    # Signals from the admin, between beats ------------------------------------------------

    def rest(self, seconds: float | None) -> None:
        """Until the next beat is due: the admin's signals as they come (the pub/sub
        channel read every SIGNAL_POLL at most, the stop looked at as often)."""
        deadline = time.monotonic() + (self.interval if seconds is None else seconds)
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            wait = min(SIGNAL_POLL, left)
            pubsub = self._subscribed()
            if pubsub is None:
                self._stop.wait(wait)
                continue
            try:
                message = pubsub.get_message(timeout=wait)
            except Exception as exc:  # noqa: BLE001 - reconnect after any error
                if self.stopping:
                    return
                errors.report("Signal subscriber", exc)
                self._close_pubsub()
                self._subscribe_at = time.monotonic() + 1.0
                continue
            if message and message.get("type") == "message":
                self._dispatch(message.get("data"))

    def _subscribed(self) -> Any:
        """The pub/sub connection on this process's channel; None while it can't be made
        (tried again a second later)."""
        if self._pubsub is not None and self._channel == keys.signal(self.identity):
            return self._pubsub
        self._close_pubsub()  # (none yet, or the process was renamed: its new channel)
        if time.monotonic() < self._subscribe_at:
            return None
        try:
            self._pubsub_client = connection.new_client()
            pubsub = self._pubsub_client.pubsub(ignore_subscribe_messages=True)
            self._channel = keys.signal(self.identity)
            pubsub.subscribe(self._channel)
        except Exception as exc:  # noqa: BLE001 - Redis away: tried again
            errors.report("Signal subscriber", exc)
            self._close_pubsub()
            self._subscribe_at = time.monotonic() + 1.0
            return None
        errors.recovered("Signal subscriber")
        self._pubsub = pubsub
        return pubsub

    def _close_pubsub(self) -> None:
        # Each attempt has its own client (and pool): close both, or every reconnect
        # during an outage would leak one.
        for closable in (self._pubsub, self._pubsub_client):
            if closable is not None:
                try:
                    closable.close()
                except Exception:  # noqa: BLE001
                    pass
        self._pubsub = self._pubsub_client = None

    def _dispatch(self, data: Any) -> None:
        command = data.decode() if isinstance(data, bytes) else str(data)
        if command == "quiet":
            log.info("quiet requested from the admin")
            self.manager.quiet()
        elif command == "stop":
            log.info("stop requested from the admin")
            self._on_stop_signal()
        elif command.startswith("cancel:"):
            watchdog = getattr(self.manager, "watchdog", None)
            if watchdog is not None:
                watchdog.cancel(command.partition(":")[2])
        else:
            log.warning("ignoring unknown signal %r on %s", command, keys.signal(self.identity))
