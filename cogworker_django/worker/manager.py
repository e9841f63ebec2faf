"""The processor threads of one worker process, its record of jobs, quiet and stop.

Duties:
- start ``CONCURRENCY`` processors, and replace (and log) one whose thread died;
- quiet: processors stop fetching, running jobs go on;
- stop: wait up to the shutdown timeout for running jobs, wait out processors still
  inside a fetch (so none takes a job after the hand-over), then hand over through the
  fetch strategy (settlement.py): nothing unfinished is lost;
- keep the work snapshot (what each thread runs) for the heartbeat.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from .. import conf, connection, errors
from .dispatch import Dispatcher
from .fetch import BasicFetch, ReliableFetch, Work
from .processor import Processor
from .record import Record

log = logging.getLogger("cogworker_django")


class Manager:
    def __init__(
        self, identity: str, fetcher: ReliableFetch | BasicFetch, concurrency: int
    ) -> None:
        self.identity = identity
        self.fetcher = fetcher
        self.concurrency = concurrency
        self.record = Record()
        self.idle_max = conf.get().FETCH_IDLE_MAX_INTERVAL
        self._quiet = threading.Event()
        # Set once the shutdown hand-over ran: a job still running then was requeued, so
        # its processor must not settle it too (a failure filed in retry would run twice).
        self.handed_over = False
        # Set when a stop begins: a job a fetch returns from then on is not run but left
        # on the in-progress list for the hand-over to requeue.
        self.stopping = False
        self.basic_handed: set[int] = set()  # see settlement._hand_over_basic
        self._work_lock = threading.Lock()
        self._work: dict[str, dict[str, Any]] = {}
        self.dispatcher = Dispatcher(self, fetcher) if isinstance(fetcher, ReliableFetch) else None
        self.processors = [Processor(self, i) for i in range(concurrency)]

    # State -------------------------------------------------------------------------------

    @property
    def quieted(self) -> bool:
        return self._quiet.is_set()

    def quiet(self) -> None:
        if not self._quiet.is_set():
            log.info("quiet: no new jobs will be fetched")
        self._quiet.set()

    def wait_quiet(self, seconds: float) -> bool:
        return self._quiet.wait(seconds)

    def busy_count(self) -> int:
        return sum(1 for p in self.processors if p.busy)

    def work_started(self, thread: str, work: Work) -> None:
        with self._work_lock:
            self._work[thread] = {"queue": work.queue, "payload": work.raw, "run_at": time.time()}

    def work_finished(self, thread: str) -> None:
        with self._work_lock:
            self._work.pop(thread, None)

    def work_snapshot(self) -> dict[str, str]:
        with self._work_lock:
            return {t: json.dumps(w) for t, w in self._work.items()}

    # Lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        for p in self.processors:
            p.start()

    def replace_dead(self) -> None:
        """Called on every beat: a processor thread that died is replaced."""
        if self.quieted:
            return
        for i, p in enumerate(self.processors):
            if p.thread is not None and not p.alive():
                log.error("%s died; starting a replacement", p.name)
                fresh = Processor(self, i)
                self.processors[i] = fresh
                fresh.start()

    def stop(self, timeout: float, force: threading.Event) -> None:
        """Quiet, wait up to ``timeout`` for running jobs (less if ``force`` is set), wait
        out processors inside a fetch, then hand over everything unfinished."""
        self.stopping = True
        self.quiet()
        deadline = time.monotonic() + timeout
        for p in self.processors:
            while p.busy and p.alive() and not force.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                p.thread.join(min(remaining, 0.1))
        # A processor not running a job is at most one fetch away from noticing quiet;
        # until it does it could still take a job, and one taken after the hand-over
        # would stay listed until orphan recovery (gaining an orphaning at every deploy).
        # A fetch normally returns within FETCH_BLOCK_SECONDS, but while Redis is slow (a
        # failover, CLIENT PAUSE) it can take as long as the socket allows: wait that out.
        self._join_fetchers(longest_fetch())
        still = [p.name for p in self.processors if p.busy and p.alive()]
        if still:
            log.warning(
                "shutdown timeout: %d job(s) still running (%s) will be requeued",
                len(still),
                ", ".join(still),
            )
        if self.dispatcher is not None:
            # Acks handed in after the last fetch: sent now, else dropped by the hand-over.
            dispatcher = self.dispatcher
            errors.best_effort("Ack", lambda: dispatcher.flush(connection.get_client()))
        from .settlement import hand_over

        hand_over(self, force)
        self.handed_over = True
        if self.dispatcher is not None and self._join_fetchers(longest_fetch()):
            # A fetch outlasted even that wait: what it took after the hand-over is on the
            # list, not run (see ``stopping``): a second pass requeues it now.
            hand_over(self, force)

    def _join_fetchers(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the threads not running a job to exit; True when
        some had not exited by the time this was called (they were inside a fetch)."""
        waiting = [p for p in self.processors if not p.busy and p.alive()]
        deadline = time.monotonic() + seconds
        for p in waiting:
            p.thread.join(max(0.0, deadline - time.monotonic()))
        return bool(waiting)


def longest_fetch() -> float:
    """The longest a fetch can take: the client's socket timeout (a reply that never
    comes) plus a connect, plus a second; FETCH_BLOCK_SECONDS + 1 at least."""
    kwargs = getattr(
        getattr(connection.get_client(), "connection_pool", None), "connection_kwargs", {}
    )
    total = 1.0
    for key, default in (
        ("socket_timeout", connection.DEFAULT_SOCKET_TIMEOUT),
        ("socket_connect_timeout", connection.DEFAULT_CONNECT_TIMEOUT),
    ):
        value = kwargs.get(key, default) if isinstance(kwargs, dict) else default
        total += float(value) if isinstance(value, int | float) and value > 0 else default
    return max(total, connection.FETCH_BLOCK_SECONDS + 1.0)
