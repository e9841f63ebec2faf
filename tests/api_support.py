"""Helpers for the api and admin tests: jobs written straight into Redis."""

from __future__ import annotations

import time

from cogworker_django.core import payload
from cogworker_django.store import homes, keys


def make_job(func: str = "testapp.jobs.record", *args, queue: str = "default", **extra) -> dict:
    return payload.build(func, args, {}, queue=queue, **extra)


def add_to(r, set_name: str, job: dict, score: float | None = None) -> str:
    """ZADD ``job`` to schedule/retry/dead; returns the raw member."""
    raw = payload.encode(job)
    if keys.spread() and isinstance(job.get("queue"), str):
        r.sadd(keys.queues(), job["queue"])  # listed, as the push that put it there would
    r.zadd(
        getattr(keys, set_name)(homes.job_home(job)),
        {raw: score if score is not None else time.time()},
    )
    return raw


def push(r, job: dict) -> str:
    raw = payload.encode(job)
    r.lpush(keys.queue(job["queue"]), raw)
    r.sadd(keys.queues(), job["queue"])
    return raw


def unique_job(r, func: str = "testapp.jobs.record", *args, queue: str = "default") -> dict:
    """A job holding an until_executed unique lock (value = its jid)."""
    job = make_job(func, *args, queue=queue, unique="until_executed")
    job["unique_digest"] = f"digest-{job['jid']}"
    r.set(keys.unique(job["unique_digest"], keys.home_of("default")), job["jid"], ex=3600)
    return job
