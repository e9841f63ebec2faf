"""A run passes only through the built-in server middleware that have work to do for it
(worker/processor.RunChain): the links are chosen once per run, before it, from what the
middleware declare (middleware.py). Structural checks: no timing here."""

from __future__ import annotations

import logging

import pytest

from cogworker_django.controls.limits import LimitsMiddleware
from cogworker_django.core import middleware, payload, unique
from cogworker_django.djtasks.middleware import TaskResultMiddleware
from cogworker_django.history import HistoryMiddleware
from cogworker_django.observe.runlog import RunLogMiddleware
from cogworker_django.observe.telemetry import TelemetryMiddleware
from cogworker_django.periodic.running_lock import RunningLockMiddleware
from cogworker_django.worker import plugins
from cogworker_django.worker.processor import RunChain
from cogworker_django.workflows.middleware import BatchMiddleware

BUILTIN_CLASSES = (
    HistoryMiddleware,
    RunLogMiddleware,
    TelemetryMiddleware,
    unique.UniqueMiddleware,
    RunningLockMiddleware,
    LimitsMiddleware,
    TaskResultMiddleware,
    BatchMiddleware,
)


def builtin_chain() -> tuple:
    """A new set of every worker's built-in middleware, as a processor's chain gets it."""
    return plugins.middleware_of(plugins.builtin())()


def plain_job(**fields) -> dict:
    job = payload.build("testapp.jobs.noop", [], {}, queue="default")
    job.update(fields)
    return job


def kinds(chain) -> list[type]:
    return [type(m) for m in chain]


def test_the_builtin_list_is_the_one_checked_here():
    chain = builtin_chain() + middleware.server_middleware()
    assert kinds(chain[: len(BUILTIN_CLASSES)]) == list(BUILTIN_CLASSES)


def test_a_plain_job_passes_through_history_only_at_the_default_settings():
    chain = RunChain(builtin_chain())
    # History is on by default; no metrics, no OTEL, the log at INFO: nothing else.
    assert kinds(chain.links(plain_job())) == [HistoryMiddleware]


def test_with_history_off_a_plain_job_passes_through_no_builtin_at_all(configure):
    configure(HISTORY=False)
    chain = RunChain(builtin_chain())
    assert chain.links(plain_job()) == ()
    assert not any(isinstance(m, HistoryMiddleware) for m in chain.full)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"unique": "until_executed", "unique_digest": "d"}, unique.UniqueMiddleware),
        ({"periodic": "p", "periodic_until_executed": True}, RunningLockMiddleware),
        ({"limits": ["x"]}, LimitsMiddleware),
        ({"kind": "task"}, TaskResultMiddleware),
        ({"bid": "b1"}, BatchMiddleware),
        ({"results_of": "b1"}, BatchMiddleware),
    ],
)
def test_each_payload_field_brings_in_its_middleware_and_only_it(fields, expected):
    chain = RunChain(builtin_chain())
    assert kinds(chain.links(plain_job(**fields))) == [HistoryMiddleware, expected]


@pytest.mark.parametrize(
    "fields",
    [{"unique": None}, {"unique": False}, {"limits": []}, {"bid": ""}, {"kind": ""}],
)
def test_an_empty_field_brings_in_nothing(fields):
    chain = RunChain(builtin_chain())
    assert kinds(chain.links(plain_job(**fields))) == [HistoryMiddleware]


def test_a_job_needing_every_builtin_keeps_the_built_in_order():
    chain = RunChain(builtin_chain())
    job = plain_job(
        unique="until_executed",
        unique_digest="d",
        periodic="p",
        periodic_until_executed=True,
        limits=["x"],
        kind="task",
        bid="b1",
    )
    links = chain.links(job)
    assert list(links) == [m for m in chain.full if not isinstance(m, RunLogMiddleware)]
    order = [BUILTIN_CLASSES.index(type(m)) for m in links]
    assert order == sorted(order)


def test_the_run_log_is_in_the_chain_exactly_while_the_logger_is_at_debug():
    chain = RunChain(builtin_chain())
    logger = logging.getLogger("cogworker_django")
    level = logger.level
    try:
        logger.setLevel(logging.DEBUG)
        assert kinds(chain.links(plain_job())) == [HistoryMiddleware, RunLogMiddleware]
        logger.setLevel(logging.INFO)
        assert kinds(chain.links(plain_job())) == [HistoryMiddleware]
    finally:
        logger.setLevel(level)


def test_telemetry_is_in_the_chain_only_with_metrics_or_otel():
    off = TelemetryMiddleware()
    assert off.metrics is None and off.tracer is None  # no --metrics-port, OTEL off
    assert RunChain((off,)).links(plain_job()) == ()
    on = TelemetryMiddleware()
    on.metrics = object()  # as with --metrics-port (telemetry.enable_metrics)
    assert RunChain((on,)).links(plain_job()) == (on,)


class Plain:
    """A user middleware, with attributes named like the built-ins' declarations: they
    mean nothing for it, it is in every run's chain."""

    active = False
    payload_fields = ("nothing",)

    @staticmethod
    def active_now():
        return False

    def __call__(self, job, queue, run):
        return run()


def test_user_middleware_is_in_every_chain_innermost():
    user = Plain()
    chain = RunChain(builtin_chain(), (user,))
    assert chain.links(plain_job())[-1] is user
    assert chain.links(plain_job(bid="b1"))[-1] is user
    assert kinds(chain.links(plain_job(bid="b1"))) == [HistoryMiddleware, BatchMiddleware, Plain]


@pytest.mark.parametrize(
    "cls",
    [c for c in BUILTIN_CLASSES if getattr(c, "payload_fields", None)],
    ids=lambda c: c.__name__,
)
def test_a_skipped_middleware_would_have_passed_the_run_straight_through(cls):
    # What the selection relies on: without any of its fields, the middleware does
    # nothing but call the rest of the chain (so leaving it out changes nothing).
    job = plain_job()
    assert not job.keys() & set(cls.payload_fields)
    before = dict(job)
    calls = []
    assert cls()(job, "default", lambda: calls.append(1) or "result") == "result"
    assert calls == [1] and job == before


def test_the_chain_runner_calls_each_link_once_in_order():
    seen = []

    def link(name):
        def mw(job, queue, run):
            seen.append(name)
            return run()

        return mw

    def perform():
        seen.append("job")
        return 42

    for n in range(4):
        seen.clear()
        chain = tuple(link(i) for i in range(n))
        assert middleware.run_server_chain(chain, {}, "q", perform) == 42
        assert seen == [*range(n), "job"]
