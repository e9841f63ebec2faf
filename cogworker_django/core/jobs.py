"""The ``@job`` decorator, the registry of runnable callables, and the ``enqueue*`` methods.

(Over 400 lines: the decorator, its options and the enqueue methods are one public
object, ``JobFunction``, whose parts only make sense together.)

Only callables in the registry can run in a worker: a payload naming anything else
goes to dead and is never imported or called (a Redis payload must not be a way to
execute code). ``@job`` registers a function under its dotted path
(``module.qualname``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import inspect
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any

from django.db import transaction

from .. import conf
from ..store import runtime
from ..store.errors import CogworkerError
from . import (
    argcodec,
    client,
    enqueue_plugins,
    middleware,
    payload,
    progress,
    recording,
    signatures,
    taskcontext,
)
from . import retry as retry_control
from .argcodec import ArgumentGone as ArgumentGone  # not retried (worker/failures.py)
from .celery_words import CeleryWords
from .jobref import JobRef, ref

UNIQUE_MODES = (None, "until_executed", "until_started", "while_executing")
_OPTION_NAMES = (
    "queue",
    "retry",
    "unique",
    "unique_for",
    "on_commit",
    "durable",  # an outbox row in the caller's transaction (durable/)
    "using_db",
    "timeout",  # job controls (controls/options.py)
    "expires_in",
    "limits",
    "result_ttl",  # how long the outcome is kept (core/results.py)
    *retry_control.OPTION_NAMES,  # retry control, the decorator's only (core/retry.py)
)

_current = threading.local()


class _Known:
    """The registered jobs (dotted path -> job) and other kinds of runnable payloads (the
    django.tasks backend registers "task"), for the process's life
    (store/runtime.registered: a test's fresh runtime keeps them)."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobFunction] = {}
        self.kinds: dict[str, Callable[[dict[str, Any]], Callable[[], Any] | None]] = {}


def _known() -> _Known:
    return runtime.registered(_Known)


_registry_lock = threading.Lock()


def current_job() -> progress.RunningJob | None:
    """Inside a running job: its payload (jid, queue, retry_count, ...), with
    ``progress()``; else None."""
    job: progress.RunningJob | None = getattr(_current, "job", None)
    if job is None:  # not a processor thread's run: an async one's (taskcontext.py)?
        run = taskcontext.current.get()
        return run.job if run is not None else None
    return job


@contextlib.contextmanager
def running(job: dict[str, Any], runner: Callable[[], Any] | None = None) -> Iterator[None]:
    """``job`` is this thread's current job for the block (a worker's whole run: the
    server middleware too, not only the job function), and ``runner`` what
    :func:`resolve` made of it (resolved once per run; see :func:`current_runner`). A
    worker's run hands in its job as a ``RunningJob`` already (its progress is the
    run's); any other dict is given one for the block."""
    if not isinstance(job, progress.RunningJob):
        job = progress.RunningJob(job)
    previous = getattr(_current, "job", None), getattr(_current, "runner", None)
    _current.job, _current.runner = job, runner
    try:
        yield
    finally:
        _current.job, _current.runner = previous


def current_runner() -> Callable[[], Any] | None:
    """Inside a run: what :func:`resolve` made of the current job (a task's runner carries
    its ``task``), so nothing resolves the same payload twice."""
    runner: Callable[[], Any] | None = getattr(_current, "runner", None)
    if runner is None:
        run = taskcontext.current.get()
        return run.runner if run is not None else None
    return runner


def registered(path: str) -> JobFunction | None:
    return _known().jobs.get(path)


def register_kind(
    kind: str, resolver: Callable[[dict[str, Any]], Callable[[], Any] | None]
) -> None:
    """Let a payload with ``"kind": kind`` run through ``resolver(job)``, which returns a
    zero-argument callable, or None when the payload names nothing runnable."""
    _known().kinds[kind] = resolver


def has_kind(kind: str) -> bool:
    """Whether payloads of ``kind`` can run here (its resolver is registered)."""
    return kind in _known().kinds


def resolve(job: dict[str, Any]) -> Callable[[], Any] | None:
    """A zero-argument callable that runs ``job``, or None if it names nothing registered.
    Never imports anything: only what is already registered can run."""
    known = _known()
    kind = job.get("kind")
    if kind:
        resolver = known.kinds.get(kind)
        return resolver(job) if resolver else None
    fn = known.jobs.get(job.get("func", ""))
    if fn is None:
        return None
    args, kwargs = job.get("args") or [], job.get("kwargs") or {}
    if job.get("tagged") is True:  # (only such payloads are walked: argcodec.py)
        return _tagged_runner(fn, args, kwargs)

    def run() -> Any:
        # Arguments the function can't take fail before the call, as BadArguments: a
        # retry would fail the same way (a TypeError from the body is retried as usual).
        fn.check_call(args, kwargs)
        return fn.func(*args, **kwargs)

    return run


def _tagged_runner(fn: JobFunction, args: list[Any], kwargs: dict[str, Any]) -> Callable[[], Any]:
    """:func:`resolve`'s runner for a payload with tagged arguments: they are restored
    inside the run (a model is read then, fresh), before the signature check. An
    ``async def`` job's runner has an ``arun`` too, which the worker's loop awaits
    (worker/aio_run.py): its models are read off the loop. A tagged value that can't be
    read is :class:`BadArguments` (dead, no retry); a row gone, :class:`ArgumentGone`."""

    def run() -> Any:
        try:
            restored, named = argcodec.restore_arguments(args, kwargs)
        except argcodec.BadTag as exc:
            raise BadArguments(f"{fn.path}: {exc}") from None
        fn.check_call(restored, named)
        return fn.func(*restored, **named)

    if fn.is_async:

        async def arun() -> Any:
            try:
                restored, named = await argcodec.arestore_arguments(args, kwargs)
            except argcodec.BadTag as exc:
                raise BadArguments(f"{fn.path}: {exc}") from None
            fn.check_call(restored, named)
            return await fn.func(*restored, **named)

        run.arun = arun  # type: ignore[attr-defined]
    return run


class NotRegistered(CogworkerError, LookupError):
    """The payload names no registered job; it is never imported or called."""


class BadArguments(CogworkerError, TypeError):
    """A job's arguments don't fit its function's signature: raised by ``enqueue`` (the
    TypeError a direct call would raise, naming the job), and by a run whose payload
    carries such arguments (a job enqueued before its function changed), which is
    filed in dead without a retry."""


def perform(job: dict[str, Any], runner: Callable[[], Any] | None = None) -> Any:
    """Run ``job`` (awaiting an ``async def`` job) with ``runner``, what :func:`resolve`
    made of it (resolved here when not given); NotRegistered if it names nothing
    registered."""
    runner = runner or resolve(job)
    if runner is None:
        raise NotRegistered(f"{job.get('func')!r} is not a registered job ({where_jobs_live()})")
    with running(job, runner):
        result = runner()
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _check_options(where: str, opts: dict[str, Any]) -> None:
    unknown = set(opts) - set(_OPTION_NAMES)
    if unknown:
        raise TypeError(
            f"{where}: unknown option(s) {sorted(unknown)}; allowed: {list(_OPTION_NAMES)}"
        )
    queue = opts.get("queue")
    if queue is not None:
        if not conf.valid_name(queue):
            raise ValueError(
                f"{where}: queue must be a non-empty string without whitespace, got {queue!r}"
            )
    retry = opts.get("retry", True)
    if not isinstance(retry, (bool, int)) or (not isinstance(retry, bool) and retry < 0):
        raise ValueError(f"{where}: retry must be True, False or a count >= 0, got {retry!r}")
    if opts.get("unique") not in UNIQUE_MODES:
        raise ValueError(
            f"{where}: unique must be one of {UNIQUE_MODES}, got {opts.get('unique')!r}"
        )
    unique_for = opts.get("unique_for")
    why = None if unique_for is None else conf.number_problem("unique_for", unique_for)
    if why:
        raise ValueError(
            f"{where}: unique_for must be a positive number of seconds, got {unique_for!r}: {why}"
        )
    on_commit = opts.get("on_commit")
    if on_commit is not None and not isinstance(on_commit, bool):
        raise ValueError(f"{where}: on_commit must be True or False, got {on_commit!r}")
    durable = opts.get("durable")
    if durable is not None and not isinstance(durable, bool):
        raise ValueError(f"{where}: durable must be True or False, got {durable!r}")
    result_ttl = opts.get("result_ttl")
    if result_ttl is not None and (
        isinstance(result_ttl, bool)
        or not isinstance(result_ttl, (int, float))
        or not math.isfinite(result_ttl)
        or not 0 <= result_ttl <= 10 * 365 * 86400
    ):
        raise ValueError(
            f"{where}: result_ttl must be seconds >= 0 (0 keeps no result), at most ten "
            f"years, got {result_ttl!r}"
        )
    retry_control.check_options(where, opts)
    for check in _plugins().checks:  # (the controls' options)
        check(where, opts)


# The furthest ahead enqueue_in / enqueue_at schedule a job: ten years. Anything later is
# almost always a unit mistake (milliseconds for seconds) and would wait for ever.
SCHEDULE_HORIZON = 10 * 365 * 86400


def _within_horizon(where: str, name: str, value: Any, ahead: float) -> None:
    if ahead > SCHEDULE_HORIZON:
        years = ahead / (365.25 * 86400)
        raise ValueError(
            f"{where}: {name} = {value!r} is {years:,.0f} years from now, beyond the "
            f"{SCHEDULE_HORIZON // (365 * 86400)}-year horizon (jobs.SCHEDULE_HORIZON); "
            "times are in seconds (an epoch in milliseconds is 1000 times too far)"
        )


def _delay_seconds(delay: float | int | dt.timedelta) -> float:
    if isinstance(delay, dt.timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise TypeError(f"enqueue_in: delay must be seconds or a timedelta, got {delay!r}")
    else:
        seconds = float(delay)
    if not math.isfinite(seconds):
        raise ValueError(f"enqueue_in: delay = {delay!r} is not a finite number of seconds")
    _within_horizon("enqueue_in", "delay", delay, seconds)
    return seconds


def _epoch(when: dt.datetime | float | int) -> float:

    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise ValueError("enqueue_at: the datetime must be timezone-aware")
        at = when.timestamp()
    elif isinstance(when, bool) or not isinstance(when, (int, float)):
        raise TypeError(f"enqueue_at: expected an aware datetime or epoch seconds, got {when!r}")
    else:
        at = float(when)
    if not math.isfinite(at):
        raise ValueError(f"enqueue_at: when = {when!r} is not a finite time")
    _within_horizon("enqueue_at", "when", when, at - time.time())
    return at


_now = time.time
# The enqueue side's plugins (options, unique, workflows, durable), installed once by
# the package's __init__: this module imports none of them (core/enqueue_plugins.py).
_plugins = enqueue_plugins.current


class _Enqueuer(CeleryWords):
    """The enqueue methods, shared by a job function and its ``using()`` variants
    (Celery's ``delay`` and ``apply_async`` too: celery_words.py)."""

    _fn: JobFunction
    _opts: dict[str, Any]

    def _build(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], at: float | None = None
    ) -> dict[str, Any]:
        return self._build_encoded(args, kwargs, at)[0]

    def _build_encoded(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        at: float | None = None,
        now: float | None = None,
        *,
        fields: dict[str, Any] | None = None,
        on_commit: bool | None = None,
        jid: str | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        """The job and its checked payload text (None when something changed the job
        after it was encoded: it joined a batch). ``fields`` (the options' payload
        fields at ``now``), ``on_commit`` and ``jid`` are given by a bulk enqueue, which
        works them out once per call."""
        self._fn.check_call(args, kwargs)
        opts = self._opts
        plugins = _plugins()
        if now is None:
            now = _now()
        extra: dict[str, Any] = (
            dict(fields) if fields is not None else plugins.payload_fields(opts, now, at)
        )
        if at is not None:
            extra["at"] = at
        if opts.get("result_ttl") is not None:
            extra["result_ttl"] = math.ceil(opts["result_ttl"])
        for give in plugins.job_fields:  # (unique: the digest of these arguments)
            give(self._fn.path, args, kwargs, opts, extra)
        job, text = payload.build_encoded(
            self._fn.path,
            args,
            kwargs,
            queue=opts["queue"],
            retry=opts.get("retry", True),
            jid=jid,
            now=now,
            **extra,
        )
        # Inside a Batch block: a member (checked already: the push happens at commit for
        # an on_commit enqueue, and its arguments were encoded above).
        if on_commit is None:
            on_commit = self._on_commit()
        durable = self._durable()
        for join in plugins.joins:
            if join(job, on_commit or durable, opts.get("using_db"), durable):
                return job, None
        return job, text

    def _on_commit(self) -> bool:
        value = self._opts.get("on_commit")
        return conf.get().ENQUEUE_ON_COMMIT if value is None else value

    def _durable(self) -> bool:
        value = self._opts.get("durable")
        return conf.get().ENQUEUE_DURABLE if value is None else value

    def _push(self, job: dict[str, Any], encoded: str | None = None) -> JobRef | None:
        if self._durable():
            # A row in the caller's transaction, pushed after its commit (durable/).
            writer = _plugins().durable_writer()
            return ref(writer.durable_enqueue(job, encoded, self._opts.get("using_db")))
        if self._on_commit():
            # Pushed (and its enqueued_at set) at the commit.
            transaction.on_commit(lambda: client.push(job), using=self._opts.get("using_db"))
            return JobRef(job["jid"])
        return ref(client.push(job, encoded=encoded))

    def enqueue(self, *args: Any, **kwargs: Any) -> JobRef | None:
        """Push the job; returns its :class:`JobRef` (the jid, a str, with ``status()``,
        ``progress()``, ``result()``), or None for a refused duplicate of a unique job."""
        return self._push(*self._build_encoded(args, kwargs))

    def enqueue_in(
        self, delay: float | int | dt.timedelta, *args: Any, **kwargs: Any
    ) -> JobRef | None:
        return self._push(self._build(args, kwargs, at=time.time() + _delay_seconds(delay)))

    def enqueue_at(
        self, when: dt.datetime | float | int, *args: Any, **kwargs: Any
    ) -> JobRef | None:
        return self._push(self._build(args, kwargs, at=_epoch(when)))

    def enqueue_many(self, calls: Iterable[Any]) -> list[JobRef | None]:
        """Push many jobs in one round trip. Each item is a tuple (or list) of positional
        arguments, a dict of keyword arguments, or ``(args_tuple, kwargs_dict)`` built
        with :func:`call`; returns their :class:`JobRef` (None in the places of refused
        duplicates)."""
        return [ref(jid) for jid in self._enqueue_many(calls)]

    def _enqueue_many(self, calls: Iterable[Any]) -> list[str | None]:
        jobs: list[dict[str, Any]] = []
        texts: list[str | None] = []
        items = list(calls)
        # Worked out once for the whole call: the enqueue time, the options' fields, the
        # commit mode, and the jids (96 random bits each, from one read of the OS's source).
        now = _now()
        plugins = _plugins()
        fields = plugins.payload_fields(self._opts, now, None)
        on_commit = self._on_commit()
        durable = self._durable()
        jids = payload.new_jids(len(items))
        if not (fields or on_commit or durable) and self._plain_bulk(plugins):
            opts = self._opts
            return client.push_plain(
                opts["queue"],
                jids,
                payload.plain_texts(
                    self._fn.path,
                    # one at a time, as built; each checked against the signature
                    (self._fn.check_call(*_split_call(item)) for item in items),
                    jids,
                    queue=opts["queue"],
                    retry=opts.get("retry", True),
                    now=now,
                ),
            )
        for item, jid in zip(items, jids, strict=True):
            args, kwargs = _split_call(item)
            job, data = self._build_encoded(
                args, kwargs, now=now, fields=fields, on_commit=on_commit, jid=jid
            )
            jobs.append(job)
            texts.append(data)
        if durable:  # one INSERT for the call (durable/writer.py)
            writer = plugins.durable_writer()
            return writer.durable_enqueue_many(jobs, texts, self._opts.get("using_db"))
        if on_commit:
            transaction.on_commit(lambda: client.push_many(jobs), using=self._opts.get("using_db"))
            return [j["jid"] for j in jobs]
        return client.push_many(jobs, texts)

    def _plain_bulk(self, plugins: enqueue_plugins.Table) -> bool:
        """True when every job of a bulk enqueue of these options (with no payload
        fields, not at commit) is a plain one: no unique lock, a boolean retry, no open
        batch block, no client middleware, no test-mode sink. Its jobs then go through
        :func:`payload.plain_texts` and :func:`client.push_plain`, the same texts and
        writes as the general path, without a dict per job."""
        opts = self._opts
        if (
            opts.get("unique")
            or type(opts.get("retry", True)) is not bool
            or opts.get("result_ttl") is not None
        ):
            return False
        try:
            sink = client.active_sink()
        except RuntimeError:
            return False  # a TESTING mode without its module: the general path says so
        return (
            sink is None
            and all(plain() for plain in plugins.plain_checks)  # (no open batch block)
            and not middleware.has_client_middleware()
        )

    def s(self, *args: Any, **kwargs: Any) -> Any:
        """A signature (workflows.Signature): this job with these arguments, checked now,
        not yet enqueued; what batch callbacks, chain steps and group members are made of."""
        signer = _plugins().signer
        if signer is None:
            raise CogworkerError(f"{self._fn.path}.s(): no enqueue plugin gives signatures")
        return signer.signature(self._fn.path, args, kwargs, self._opts, self)

    def using(self, **options: Any) -> _BoundJob:
        """A variant with other options (queue, retry, unique, unique_for, on_commit,
        durable, using_db, result_ttl, and the job controls). Retry control (retry_on,
        retry_in, on_dead) is the decorator's only: a worker reads it from the function."""
        where = f"{self._fn.path}.using()"
        given = [name for name in retry_control.OPTION_NAMES if name in options]
        if given:
            raise TypeError(
                f"{where}: {', '.join(given)} can only be given to @job (a worker reads retry "
                "control from the registered function, not from the payload)"
            )
        _check_options(where, options)
        return _BoundJob(self._fn, {**self._opts, **options})


class Call(tuple[Any, ...]):
    """``(args, kwargs)`` for :meth:`enqueue_many`; build it with :func:`call`."""


def call(*args: Any, **kwargs: Any) -> Call:
    return Call((args, kwargs))


def _split_call(item: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(item, Call):
        return tuple(item[0]), dict(item[1])
    if isinstance(item, dict):
        return (), item
    if isinstance(item, (tuple, list)):
        return tuple(item), {}
    return (item,), {}


class _BoundJob(_Enqueuer):
    def __init__(self, fn: JobFunction, opts: dict[str, Any]) -> None:
        self._fn, self._opts = fn, opts

    def __repr__(self) -> str:
        return f"<job {self._fn.path} using {self._opts}>"


class JobFunction(_Enqueuer):
    """What ``@job`` returns: still callable as the plain function, plus enqueue methods."""

    def __init__(self, func: Callable[..., Any], opts: dict[str, Any]) -> None:
        self.func = func
        self.path = f"{func.__module__}.{func.__qualname__}"
        self.is_async = inspect.iscoroutinefunction(func)
        self._fn = self
        self._opts = {"queue": "default", "retry": True, **opts}
        self.__wrapped__ = func
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", self.path)
        self.__qualname__ = getattr(func, "__qualname__", self.path)
        self.__module__ = func.__module__
        # Modules being imported when it was registered (innermost first; see job()).
        self.imported_by: tuple[str, ...] = ()

    @property
    def options(self) -> dict[str, Any]:
        return dict(self._opts)

    @functools.cached_property
    def _call_check(self) -> signatures.CallCheck:
        return signatures.CallCheck(self.func)

    def check_call(self, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``(args, kwargs)`` when the function takes them, else :class:`BadArguments`
        (a TypeError) saying why, as a direct call would."""
        check = self._call_check
        why = check.problem(args, kwargs)
        if why is not None:
            raise BadArguments(f"{self.path}{check.signature} does not take these arguments: {why}")
        return args, kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.path}>"

    # Testing helpers (see testing.py) -------------------------------------------------------

    @property
    def jobs(self) -> list[dict[str, Any]]:
        """The jobs of this function recorded by ``testing.fake()``, oldest first."""
        return recording.recorded(self.path)

    def perform_one(self) -> Any:
        """Run the oldest recorded job of this function; returns its result."""
        job = recording.take_oldest(self.path)
        if job is None:
            raise LookupError(f"no recorded job of {self.path} to perform")
        return recording.run(job, perform)

    def drain(self) -> int:
        """Run this function's recorded jobs until none is left; returns how many ran."""
        count = 0
        while (job := recording.take_oldest(self.path)) is not None:
            recording.run(job, perform)
            count += 1
        return count

    def clear(self) -> None:
        recording.clear(self.path)


# The modules of every installed app a worker imports at start, so that the jobs they
# define can run: ``jobs`` (this package's convention) and ``tasks`` (Celery's and
# django.tasks'); besides them, the modules of COGWORKER["JOB_MODULES"]. A job defined
# elsewhere runs only if one of these (or Django's own start-up: models, admin, app
# configs) imports its module.
JOB_MODULES = ("jobs", "tasks")


def where_jobs_live() -> str:
    """Where a worker finds jobs, for messages about a job it does not know."""
    try:
        extra = conf.get().JOB_MODULES
    except Exception:  # noqa: BLE001 - a message must not raise (bad settings say so elsewhere)
        extra = ()
    listed = f" ({', '.join(extra)})" if extra else ""
    return (
        "a worker runs the @job functions of the jobs.py and tasks.py modules of installed "
        f"apps and of the modules in COGWORKER['JOB_MODULES']{listed}, and of what they "
        "import"
    )


class JobModuleError(CogworkerError, ImportError):
    """A job module (an installed app's ``jobs``, or one of ``COGWORKER["JOB_MODULES"]``)
    could not be imported; the message names the module and its file, ``__cause__`` is
    the error it raised."""


def job_module_names() -> list[tuple[str, bool]]:
    """(dotted name, required) of every module a worker imports for its jobs: each
    installed app's ``jobs`` (required) and ``tasks`` (not: it may belong to another task
    system), then ``COGWORKER["JOB_MODULES"]`` (required)."""
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    names = [
        (f"{config.name}.{name}", name == "jobs")
        for config in apps.get_app_configs()
        for name in JOB_MODULES
        if module_has_submodule(config.module, name)
    ]
    names += [(dotted, True) for dotted in conf.get().JOB_MODULES]
    return names


def _where_it_failed(dotted: str, exc: BaseException) -> str:
    """The module's file, and the line of it the error came from when it did."""
    import importlib.util
    import traceback

    try:
        spec = importlib.util.find_spec(dotted)
    except Exception:  # noqa: BLE001 - its package is missing or fails itself
        spec = None
    origin = spec.origin if spec is not None else None
    if not origin:
        return "not found"
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == origin]
    return f"{origin}, line {lines[-1]}" if lines else origin


def import_job_modules() -> list[str]:
    """Import every job module (:func:`job_module_names`); returns the names imported. A
    required one that fails raises :class:`JobModuleError` naming it and its file (its
    jobs could not run); a ``tasks`` module that fails is logged and skipped."""
    import importlib
    import logging

    from ..store import errors

    imported = []
    for dotted, required in job_module_names():
        try:
            importlib.import_module(dotted)
        except Exception as exc:
            where = _where_it_failed(dotted, exc)
            listed = " (COGWORKER['JOB_MODULES'])" if dotted in conf.get().JOB_MODULES else ""
            if required:
                raise JobModuleError(
                    f"The job module {dotted}{listed} could not be imported ({where}): "
                    f"{errors.describe(exc)}"
                ) from exc
            logging.getLogger("cogworker_django").error(
                "%s could not be imported (%s); its jobs will not run here: %s",
                dotted,
                where,
                errors.describe(exc),
            )
            continue
        imported.append(dotted)
    return imported


def registered_jobs() -> list[JobFunction]:
    """Every registered job, by dotted path."""
    jobs = _known().jobs
    with _registry_lock:
        return [jobs[path] for path in sorted(jobs)]


def _importers(depth: int) -> tuple[str, ...]:
    """The modules being imported when ``@job`` ran (innermost first), read from the call
    stack; ``"django.setup"`` stands for Django's start-up (app configs, models, admin
    autodiscovery), which a worker runs too."""
    found: list[str] = []
    try:
        frame: FrameType | None = sys._getframe(depth)
    except ValueError:
        return ()
    registry = os.path.join("django", "apps", "registry.py")
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>":
            found.append(str(frame.f_globals.get("__name__", "")))
        elif code.co_name == "populate" and code.co_filename.endswith(registry):
            found.append("django.setup")
        frame = frame.f_back
    return tuple(found)


def job(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Register ``func`` as a job: ``@job`` or ``@job(queue=..., retry=..., unique=...)``."""

    def register(f: Callable[..., Any]) -> JobFunction:
        if isinstance(f, JobFunction):
            raise TypeError(f"{f.path} is already a job")
        if not callable(f):
            raise TypeError(f"@job needs a function, got {f!r}")
        path = f"{f.__module__}.{f.__qualname__}"
        if "<locals>" in path:
            raise TypeError(f"@job functions must be importable module-level functions, not {path}")
        _check_options(f"@job on {path}", options)
        fn = JobFunction(f, options)
        # For the check that warns about a job no worker would import (checks.py).
        fn.imported_by = _importers(1)
        with _registry_lock:
            _known().jobs[path] = fn
        return fn

    return register(func) if func is not None else register
