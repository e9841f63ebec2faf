"""The processor threads of one worker process, its ledger of jobs, quiet and stop.

Duties:
- build the process's run state (the ledger, the control) and the job source from the
  fetch strategy, and hand them to ``CONCURRENCY`` processors;
- replace (and log) a processor whose thread died, as soon as it dies;
- run the event loop of ``async def`` jobs (aio.py, with reliable fetch): its slots are
  fetched for with the threads', and it stops with them;
- run the watchdog (time limits, cancellation: timeouts.py) and replace a processor
  whose run it abandoned (stuck in a C call past the grace), once the job is filed;
- quiet: processors stop fetching, running jobs go on;
- stop: wait up to the shutdown timeout for running jobs, wait out processors still
  inside a fetch (so none takes a job after the hand-over), then hand over through the
  fetch strategy (settlement.py): nothing unfinished is lost; then free this process's
  limiter leases.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import conf
from ..controls import limits
from ..controls.errors import JobTimeout
from ..core import middleware
from ..store import connection, errors
from .fetch import FetchStrategy
from .jobsource import FeedsLoop
from .ledger import PERFORMING, SETTLING, Control, Ledger
from .processor import Processor, RunChain
from .settlement import hand_over
from .timeouts import Watchdog, Watched

if TYPE_CHECKING:
    from .aio import AsyncSide

log = logging.getLogger("cogworker_django")

# How long the coroutines cancelled at shutdown get to unwind before the hand-over.
CANCEL_UNWIND = 2.0


class Manager:
    def __init__(
        self,
        identity: str,
        fetcher: FetchStrategy,
        concurrency: int,
        async_concurrency: int | None = None,
        *,
        middleware: Callable[[], tuple[Any, ...]] | None = None,
    ) -> None:
        self.identity = identity
        # The built-in server middleware, a new set per chain (the plugins'; all of the
        # built-ins when not given).
        if middleware is None:
            from . import plugins

            middleware = plugins.middleware_of(plugins.builtin())
        self._middleware = middleware
        self.fetcher = fetcher
        self.concurrency = concurrency
        if async_concurrency is None:
            async_concurrency = conf.get().ASYNC_CONCURRENCY
        self.async_concurrency = async_concurrency
        self.ledger = Ledger()
        self.control = Control(conf.get().FETCH_IDLE_MAX_INTERVAL)
        self.source = fetcher.source(self.ledger, self.control, concurrency)
        # Set once the shutdown hand-over ran (for callers that wait on it).
        self.handed_over = False
        self.watchdog = Watchdog(self._abandon)
        self.processors = [self._processor(i) for i in range(concurrency)]
        self.aio = self._event_loop()

    def _event_loop(self) -> AsyncSide | None:
        """The event loop's side, for a job source that fetches for it (reliable fetch's)
        when any async job is registered; with basic fetch an async job runs in a
        processor thread, on a loop of its own."""
        source = self.source
        if not isinstance(source, FeedsLoop):
            return None
        from .aio import AsyncSide, Sorter

        if not Sorter().active:
            return None  # no async job registered: the plain path alone, as it was
        aio = AsyncSide(
            self.async_concurrency,
            ledger=self.ledger,
            strategy=self.fetcher,
            control=self.control,
            watchdog=self.watchdog,
            chain=self._chain(),
            hand_in=source.hand_in,
        )
        source.attach_loop(aio)
        return aio

    def _chain(self) -> RunChain:
        return RunChain(self._middleware(), middleware.server_middleware())

    def _processor(self, index: int) -> Processor:
        return Processor(
            index,
            ledger=self.ledger,
            strategy=self.fetcher,
            source=self.source,
            control=self.control,
            on_death=self._processor_died,
            chain=self._chain(),
            watchdog=self.watchdog,
        )

    # State -------------------------------------------------------------------------------

    @property
    def quieted(self) -> bool:
        return self.control.quiet.is_set()

    @property
    def stopping(self) -> bool:
        return self.control.stopping.is_set()

    def quiet(self) -> None:
        if self.control.quiet.is_set():
            return  # already woken: a wake-up per thread each time would pile up unread
        log.info("quiet: no new jobs will be fetched")
        self.control.quiet.set()
        self.source.wake_waiting()

    def busy_count(self) -> int:
        return self.ledger.busy()

    def work_snapshot(self) -> dict[str, str]:
        return self.ledger.board()

    # Lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.watchdog.start()
        if self.aio is not None:
            self.aio.start()  # before the first fetch can hand it a job
        self.source.start()
        for p in self.processors:
            p.start()

    def _abandon(self, w: Watched) -> None:
        """The watchdog's call for a run still inside its job TIMEOUT_GRACE after it was
        interrupted: file it for its stuck thread, and give the slot a fresh thread."""
        s = conf.get()
        assert w.fired is not None
        if issubclass(w.fired, JobTimeout):
            what = f"ran past its timeout of {w.state.timeout or 0:g} s"
        else:
            what = "was cancelled"
        exc = w.fired(
            f"{w.state.func} {what} and did not return within TIMEOUT_GRACE "
            f"({s.TIMEOUT_GRACE:g} s) of being interrupted (stuck where Python can't reach, "
            "such as a C call): its thread was abandoned"
        )
        stuck: Processor = w.processor
        try:
            settled = stuck.abandon_run(w.work, exc)
        except Exception as err:  # noqa: BLE001 - logged; the slot still gets its thread
            log.error("abandoning %s failed: %s", stuck.name, errors.describe(err), exc_info=err)
            settled = stuck.abandoned
        if not settled:
            return  # it came back and claimed its own settlement just now
        if stuck.index < 0:
            # An async run: its slot on the event loop came back with the filing
            # (aio_run.py); the coroutine runs on unowned.
            log.error(
                "%s (jid %s) stuck past TIMEOUT_GRACE; %s abandoned and the job filed",
                w.state.func,
                w.state.jid,
                stuck.name,
            )
            return
        if stuck.thread is not None:
            stuck.thread.name = f"{stuck.name}-abandoned"
        log.error(
            "%s (jid %s) %s; %s abandoned and the job filed",
            w.state.func,
            w.state.jid,
            "stuck past TIMEOUT_GRACE",
            stuck.name,
        )
        self.watchdog.call_soon(lambda: self._replace(stuck, "abandoned"))

    def _processor_died(self, dead: Processor, exc: BaseException) -> None:
        """Called on the dying thread: log it, and have a replacement started (not while
        quiet: a thread ending then is leaving on purpose)."""
        if self.quieted:
            return
        log.error("%s died: %s", dead.name, errors.describe(exc), exc_info=exc)
        self.watchdog.call_soon(lambda: self._replace(dead, "died"))

    def _replace(self, gone: Processor, why: str) -> None:
        """(The watchdog's thread: every replacement is made there, one at a time.) A
        fresh thread in ``gone``'s slot, unless one replaced it already or the process is
        quiet."""
        if self.processors[gone.index] is not gone or self.quieted:
            return
        fresh = self._processor(gone.index)
        self.processors[gone.index] = fresh
        log.warning("%s %s; starting a replacement", gone.name, why)
        fresh.start()

    def begin_stop(self) -> None:
        """From now on no job is fetched or started: what a fetch brings back is left
        listed for the hand-over (:meth:`stop`). Called as soon as a stop is asked for,
        before the other parts of the process are stopped."""
        self.control.stopping.set()
        self.quiet()

    def stop(self, timeout: float, force: threading.Event) -> None:
        """Quiet, wait up to ``timeout`` for running jobs (less if ``force`` is set), wait
        out processors inside a fetch, then hand over everything unfinished."""
        self.begin_stop()
        self.ledger.wait_idle(timeout, force)  # threads and coroutines alike
        # A processor not running a job is at most one fetch away from noticing quiet;
        # until it does it could still take a job, and one taken after the hand-over
        # would stay listed until orphan recovery (gaining an orphaning at every deploy).
        # A fetch normally returns within FETCH_BLOCK_SECONDS, but while Redis is slow (a
        # failover, CLIENT PAUSE) it can take as long as the socket allows: wait that out.
        fetching = self._join_fetchers(connection.longest_call())
        self._tell_still_running(force)
        # Acks handed in after the last fetch: sent now, else dropped by the hand-over.
        source = self.source
        errors.best_effort("Ack", lambda: source.flush(connection.get_client()))
        if self.aio is not None and self.aio.runs:
            # Coroutines still running are refused their settlement from here (ledger.py),
            # then cancelled: each unwinds (its finally blocks run) before the hand-over
            # requeues its job, and none is both requeued and filed.
            self.ledger.begin_hand_over(connection.longest_call())
            self.aio.cancel_running(CANCEL_UNWIND)
        hand_over(self.ledger, self.fetcher, force)
        self.handed_over = True
        if self._join_fetchers(connection.longest_call()) or fetching:
            # A fetch out at either wait (or a thread not yet gone) may have taken jobs
            # after the hand-over read the list, listed and not run (see
            # Control.stopping), even if it came back before the second wait looked: a
            # second pass requeues them now. Nearly every stop runs it; with nothing left
            # it is one LRANGE per home.
            hand_over(self.ledger, self.fetcher, force)
        self.watchdog.stop()
        if self.aio is not None:
            self.aio.stop()
        # Every run is settled or handed over: no lease of this process is needed now.
        limits.release_all()

    def _tell_still_running(self, force: threading.Event) -> None:
        still = [self.ledger.describe(w) for w in self.ledger.works(PERFORMING, SETTLING)]
        if still:
            log.warning(
                "%s: %d job(s) still running (%s) will be requeued, each interruption "
                "counted toward MAX_ORPHANINGS (then dead): a job that may never finish "
                "needs a time limit, @job(timeout=...)",
                "second TERM" if force.is_set() else "shutdown timeout",
                len(still),
                ", ".join(still),
            )

    def _join_fetchers(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the job source's fetching (reliable fetch's feeder
        thread) to stop and the threads not running a job to exit; True when some of them
        were still inside a fetch (or had not exited) by the time this was called."""
        deadline = time.monotonic() + seconds
        fetching = self.source.join(seconds)
        waiting = [p for p in self.processors if not p.busy and p.alive()]
        for p in waiting:
            assert p.thread is not None
            p.thread.join(max(0.0, deadline - time.monotonic()))
        return fetching or bool(waiting)
