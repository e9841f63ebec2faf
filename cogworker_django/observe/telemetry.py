"""A worker's own telemetry: Prometheus metrics of its runs, and each run's trace span.

(Over 400 lines: the metrics, the multiprocess set-up for ``--processes`` and the run's
span share one middleware and one per-run record, so they live together.)

:class:`TelemetryMiddleware` is a built-in server middleware (listed in
``worker/plugins.py``'s Telemetry plugin, so every worker has it). It does
nothing unless the worker serves metrics (``manage.py cogworker --metrics-port``) or
``COGWORKER["OTEL"]`` is on. Metrics are counted in this process's memory with
``prometheus_client``; there is no Redis call per job (docs/performance.md gives the
measured cost).

Worker metrics (``cogworker_`` prefix):

- ``jobs_total{job,queue,outcome}``: runs by how they ended, one outcome per run (see
  :data:`OUTCOMES`);
- ``job_duration_seconds{job,queue}``: histogram of run durations (the middleware
  chain inside this one and the job);
- ``job_wait_seconds{queue}``: histogram of the time from enqueue (or from the move of a
  scheduled or retried job to its queue) to the start of the run;
- ``worker_busy_threads`` and ``worker_threads``: processor threads running a job, and
  all of them;
- ``fetch_round_trips_total{fetch}``: fetch script calls (``reliable``: lua/fetch.lua,
  which also carries the acks; ``basic``: lua/basic_fetch.lua; the BRPOP a basic fetch
  waits in when every queue is empty is not counted).

With ``--processes N`` the supervisor serves every child's metrics through its one port:
prometheus_client's multiprocess mode over a private directory it creates at start and
removes at stop (:class:`Supervision`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from .. import conf
from ..controls.errors import JobCancelled, JobTimeout
from ..core import locks, payload
from ..core.middleware import Reschedule
from ..store import errors, runtime
from . import health

log = logging.getLogger("cogworker_django")

# How a run ended; each run is counted under exactly one:
#   success    it returned;
#   retry      it raised and goes to the retry set;
#   dead       it raised on its last allowed try (or with retry=False): the dead set;
#   failure    it raised and this run files nothing: the shutdown hand-over had already
#              put the job back on its queue, and its requeued copy runs again;
#   expired, cancelled, timeout   reserved for job controls (a job dropped past its
#              deadline, cancelled by an operator, stopped at its time limit).
OUTCOMES = ("success", "failure", "retry", "dead", "expired", "cancelled", "timeout")


# Exception class -> outcome, for failures that are not the retry policy's to place: the
# job controls' (more with register_outcome).
# (Registered for the process's life: store/runtime.registered.)
class _Outcomes(dict[type[BaseException], str]):
    def __init__(self) -> None:
        super().__init__({JobTimeout: "timeout", JobCancelled: "cancelled"})


def _outcomes() -> _Outcomes:
    return runtime.registered(_Outcomes)


# Seconds: sub-millisecond jobs to hour-long ones.
DURATION_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
WAIT_BUCKETS = (
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    21600.0,
    86400.0,
)
FETCH_SCRIPTS = {"fetch": "reliable", "basic_fetch": "basic"}
DEFAULT_ADDR = "0.0.0.0"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def register_outcome(exc_class: type[BaseException], outcome: str) -> None:
    """Count a run that raised ``exc_class`` (or a subclass) under ``outcome``."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
    _outcomes()[exc_class] = outcome


def failed_outcome(job: dict[str, Any], exc: BaseException) -> str:
    """The outcome of a run of ``job`` that raised ``exc``, decided as the worker decides
    where the job goes next (worker/failures.after_failure counts the failure after the
    middleware chain has unwound)."""
    outcomes = _outcomes()
    for cls in type(exc).__mro__:
        outcome = outcomes.get(cls)
        if outcome is not None:
            return outcome
    if locks.run_abandoned():
        return "failure"
    try:
        count = int(job.get("retry_count") or 0) + 1
    except (TypeError, ValueError):
        count = 1
    return "dead" if count > payload.max_retries(job.get("retry")) else "retry"


def prometheus() -> Any:
    from ..metrics import prometheus as needs_prometheus

    return needs_prometheus()


class WorkerMetrics:
    """This process's metric objects, with the labelled children cached per label set
    (prometheus_client's ``labels()`` costs more than the increment itself)."""

    def __init__(self, registry: Any = None) -> None:
        pc = prometheus()
        kw = {} if registry is None else {"registry": registry}
        self.jobs = pc.Counter(
            "cogworker_jobs", "Runs by how they ended.", ["job", "queue", "outcome"], **kw
        )
        self.duration = pc.Histogram(
            "cogworker_job_duration_seconds",
            "How long runs took.",
            ["job", "queue"],
            buckets=DURATION_BUCKETS,
            **kw,
        )
        self.wait = pc.Histogram(
            "cogworker_job_wait_seconds",
            "Time from enqueue to the start of the run.",
            ["queue"],
            buckets=WAIT_BUCKETS,
            **kw,
        )
        self.busy = pc.Gauge(
            "cogworker_worker_busy_threads",
            "Processor threads running a job.",
            multiprocess_mode="livesum",
            **kw,
        )
        self.threads = pc.Gauge(
            "cogworker_worker_threads",
            "Processor threads.",
            multiprocess_mode="livesum",
            **kw,
        )
        self.loop_lag = pc.Gauge(
            "cogworker_event_loop_lag_seconds",
            "How late the event loop of async jobs ran its ticks, the worst of the last 10 s "
            "(worker/loopwatch.py): a coroutine making a blocking call raises it.",
            multiprocess_mode="livemax",
            **kw,
        )
        self.fetches = pc.Counter(
            "cogworker_fetch_round_trips", "Fetch script calls.", ["fetch"], **kw
        )
        self._runs: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}
        self._waits: dict[str, Any] = {}
        self._fetch_children = {mode: self.fetches.labels(mode) for mode in FETCH_SCRIPTS.values()}

    def ran(self, job: str, queue: str, outcome: str, duration: float | None) -> None:
        children = self._runs.get((job, queue))
        if children is None:
            children = self._runs[(job, queue)] = (self.duration.labels(job, queue), {})
        counter = children[1].get(outcome)
        if counter is None:
            counter = children[1][outcome] = self.jobs.labels(job, queue, outcome)
        counter.inc()
        if duration is not None:
            children[0].observe(duration)

    def waited(self, queue: str, seconds: float) -> None:
        child = self._waits.get(queue)
        if child is None:
            child = self._waits[queue] = self.wait.labels(queue)
        child.observe(seconds)

    def script_called(self, name: str) -> None:
        mode = FETCH_SCRIPTS.get(name)
        if mode is not None:
            self._fetch_children[mode].inc()


# (Registered for the process's life: store/runtime.registered. Prometheus's own
# registry is process-wide: a second set of these metrics could not be registered.)
class _Enabled:
    metrics: WorkerMetrics | None = None


_metrics_lock = threading.Lock()


def enable_metrics(concurrency: int | None = None, registry: Any = None) -> WorkerMetrics:
    """Count this process's runs from now on (once per process; later calls return the
    same metrics). Called by the worker command before its processors start."""
    enabled = runtime.registered(_Enabled)
    with _metrics_lock:
        metrics = enabled.metrics
        if metrics is None:
            metrics = enabled.metrics = WorkerMetrics(registry)
        # The fetch scripts counted (on the runtime in use: a test's fresh one too).
        runtime.current().script_observer = metrics.script_called
        if concurrency is not None:
            metrics.threads.set(concurrency)
        return metrics


def worker_metrics() -> WorkerMetrics | None:
    return runtime.registered(_Enabled).metrics


def record_outcome(job: dict[str, Any], queue: str, outcome: str) -> None:
    """Count a run that ended without going through the middleware chain (a job control
    that drops an expired job, say) under ``outcome``."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
    metrics = worker_metrics()
    if metrics is not None:
        metrics.ran(str(job.get("func")), queue, outcome, None)


def _enqueued_at(job: dict[str, Any]) -> float | None:
    value = job.get("enqueued_at")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value else None


class TelemetryMiddleware:
    """Built-in server middleware: the run's metrics and its OpenTelemetry consumer span.
    Only the job's own exception ever leaves it (rule 4: telemetry never fails a job)."""

    def __init__(self) -> None:
        self.metrics = worker_metrics()
        self.tracer = None
        if conf.get().OTEL:
            from . import tracing

            self.tracer = tracing.tracer()

    @property
    def active(self) -> bool:
        """False without metrics and OTEL: no run passes through it (RunChain)."""
        return self.metrics is not None or self.tracer is not None

    def __call__(self, job: dict[str, Any], queue: str, run: Callable[[], Any]) -> Any:
        if self.tracer is not None:
            from . import tracing

            with tracing.consumer_span(self.tracer, job, queue) as span:
                return self._measured(job, queue, run, span)
        if self.metrics is None:
            return run()
        return self._measured(job, queue, run, None)

    def _measured(self, job: dict[str, Any], queue: str, run: Callable[[], Any], span: Any) -> Any:
        t0 = self._started(job, queue)
        outcome, error = "success", None
        try:
            return run()
        except Reschedule:
            outcome = ""  # not a run: back on the schedule without running
            raise
        except BaseException as exc:
            outcome, error = failed_outcome(job, exc), exc
            raise
        finally:
            self._ended(job, queue, t0, outcome, error, span)

    async def acall(self, job: dict[str, Any], queue: str, run: Callable[[], Any]) -> Any:
        """The same around an async run, on the worker's event loop (worker/aio_chain.py)."""
        if self.tracer is not None:
            from . import tracing

            with tracing.consumer_span(self.tracer, job, queue) as span:
                return await self._ameasured(job, queue, run, span)
        if self.metrics is None:
            return await run()
        return await self._ameasured(job, queue, run, None)

    async def _ameasured(
        self, job: dict[str, Any], queue: str, run: Callable[[], Any], span: Any
    ) -> Any:
        t0 = self._started(job, queue)
        outcome, error = "success", None
        try:
            return await run()
        except Reschedule:
            outcome = ""
            raise
        except BaseException as exc:
            outcome, error = failed_outcome(job, exc), exc
            raise
        finally:
            self._ended(job, queue, t0, outcome, error, span)

    def _started(self, job: dict[str, Any], queue: str) -> float:
        metrics = self.metrics
        if metrics is not None:
            enqueued = _enqueued_at(job)
            if enqueued is not None:
                metrics.waited(queue, max(0.0, time.time() - enqueued))
            metrics.busy.inc()
        return time.perf_counter()

    def _ended(
        self,
        job: dict[str, Any],
        queue: str,
        t0: float,
        outcome: str,
        error: BaseException | None,
        span: Any,
    ) -> None:
        duration = time.perf_counter() - t0
        try:
            metrics = self.metrics
            if metrics is not None:
                metrics.busy.dec()
                if outcome:
                    metrics.ran(str(job.get("func")), queue, outcome, duration)
            if span is not None:
                span.ended(outcome or "rescheduled", error)
        except Exception as exc:  # noqa: BLE001 - rule 4
            errors.report("Telemetry", exc, "a run was not counted")


# Serving /metrics ------------------------------------------------------------------------


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


def wsgi_app(
    registry: Any, token: str | None, health: Callable[[], tuple[bool, str]] | None = None
) -> Callable:
    """/metrics of ``registry``, behind the bearer ``token`` when one is set; /healthz
    from ``health()`` (observe/health.py; no token: it tells only whether the process
    beats, for probes that send none)."""
    from prometheus_client import make_wsgi_app

    from ..metrics import authorization_problem

    serve = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if health is not None and environ.get("PATH_INFO") == "/healthz":
            ok, line = health()
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")],
            )
            return [line.encode() + b"\n"]
        if environ.get("PATH_INFO") not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: the metrics are at /metrics\n"]
        problem = authorization_problem(environ.get("HTTP_AUTHORIZATION"), token)
        if problem == 401:
            start_response(
                "401 Unauthorized",
                [
                    ("Content-Type", "text/plain"),
                    ("WWW-Authenticate", 'Bearer realm="cogworker metrics"'),
                ],
            )
            return [b"a bearer token is required\n"]
        if problem == 403:
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"wrong token\n"]
        return serve(environ, start_response)

    return app


class Exporter:
    """An HTTP server thread answering /metrics."""

    def __init__(
        self,
        registry: Any,
        port: int,
        addr: str = DEFAULT_ADDR,
        health: Callable[[], tuple[bool, str]] | None = None,
    ) -> None:
        from prometheus_client.exposition import ThreadingWSGIServer

        app = wsgi_app(registry, conf.get().METRICS_TOKEN, health)
        self.server = make_server(addr, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
        self.port = self.server.server_port
        self.addr = addr
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="metrics", daemon=True
        )

    def start(self) -> Exporter:
        self.thread.start()
        log.info("metrics served on http://%s:%d/metrics", self.addr, self.port)
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def close_inherited(self) -> None:
        """In a forked child: close the listening socket it inherited (the supervisor's
        thread serves it; the child has no such thread)."""
        self.server.socket.close()


def worker_exporter(
    port: int,
    concurrency: int,
    addr: str = DEFAULT_ADDR,
    health: Callable[[], tuple[bool, str]] | None = None,
) -> Exporter:
    """One worker process: count its runs, and an exporter bound to ``port`` (started by
    the worker's Metrics plugin) serving them with the process's default registry (so
    metrics the application's jobs define are served too), and /healthz from ``health``."""
    pc = prometheus()
    enable_metrics(concurrency)
    return Exporter(pc.REGISTRY, port, addr, health)


class Supervision:
    """``--processes N``: the supervisor serves every child's metrics through one port,
    from a private multiprocess directory created here and removed by :meth:`stop`."""

    def __init__(
        self, port: int, concurrency: int, addr: str = DEFAULT_ADDR, processes: int = 1
    ) -> None:
        pc = prometheus()
        from prometheus_client import multiprocess, values

        self.concurrency = concurrency
        self.previous = os.environ.get(MULTIPROC_ENV)
        self.path = tempfile.mkdtemp(prefix="cogworker-metrics-")
        os.environ[MULTIPROC_ENV] = self.path
        # Metric values made from now on (in the children) live in files there, whatever
        # was imported before the variable was set.
        values.ValueClass = values.get_value_class()
        registry = pc.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self.path)
        # /healthz: every child's beats, as files in the same directory.
        self.children = health.Children(self.path)
        try:
            self.exporter = Exporter(registry, port, addr, self.children.answer)
        except BaseException:
            self._remove_directory()
            raise
        self.exporter.start()
        log.info("metrics of %d processes from %s", processes, self.path)

    def child_started(self) -> str:
        """In a newly forked child, before its worker starts; returns the file its
        beats touch (/healthz)."""
        self.exporter.close_inherited()
        enable_metrics(self.concurrency)
        return self.children.path(os.getpid())

    def child_forked(self, pid: int) -> None:
        """In the supervisor, once it has forked ``pid``."""
        self.children.forked(pid)

    def child_exited(self, pid: int) -> None:
        """A child is gone: its live gauges (busy threads) stop counting; its counters
        stay, so totals never go down."""
        from prometheus_client import multiprocess

        self.children.exited(pid)
        try:
            multiprocess.mark_process_dead(pid, self.path)
        except OSError:
            pass

    def stop(self) -> None:
        self.exporter.stop()
        self._remove_directory()

    def _remove_directory(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self.previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = self.previous
