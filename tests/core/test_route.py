"""Where a push goes (core/route.py): one decision for single and bulk pushes, and one
writer (core/client.py) that lists the queue beside the write for every kind that does,
with the same refresh and the same report of a broken listing."""

from __future__ import annotations

import logging
import time

from django.test import override_settings

from cogworker_django.core import client, payload, route
from cogworker_django.store import keys, listing

CLUSTER_URL = "redis://127.0.0.1:7000/0"  # names only: nothing here connects


def built(**extra):
    return payload.build("testapp.jobs.noop", ["x"], **extra)


def test_a_plain_job_goes_to_its_queues_list_as_built(prefix):
    job = built(queue="q")
    text = payload.encode(job)
    where = route.destination(job, time.time(), text)
    assert (where.kind, where.key, where.value, where.score) == (
        "list",
        keys.queue("q"),
        text,
        None,
    )
    assert where.listed  # P:queues beside the write


def test_a_job_that_was_due_is_stamped_now_and_encoded_again(prefix):
    now = time.time()
    job = built(queue="q")
    job["at"] = now - 5  # due: goes to the queue now
    text = payload.encode(job)
    where = route.destination(job, now, text)
    assert where.kind == "list" and "at" not in job and job["enqueued_at"] == now
    assert where.value == payload.encode(job) != text


def test_a_scheduled_job_goes_to_its_homes_schedule_scored_by_at(prefix):
    now = time.time()
    job = built(queue="q")
    job["at"] = now + 60
    text, built_at = payload.encode(job), job.get("enqueued_at")
    where = route.destination(job, now, text)
    assert (where.kind, where.key, where.score) == (
        "schedule",
        keys.schedule(keys.root()),
        now + 60,
    )
    assert where.value == text and job.get("enqueued_at") == built_at  # as built
    assert payload.decode(route.destination(job, now).value)["at"] == now + 60
    assert not where.listed  # one home: the move to the queue lists it


@override_settings(
    COGWORKER={"REDIS_URL": CLUSTER_URL, "CLUSTER": True, "PREFIX": "cw", "TEST_PREFIX": False}
)
def test_with_a_home_per_queue_a_scheduled_push_lists_its_queue():
    now = time.time()
    job = built(queue="q")
    job["at"] = now + 60
    where = route.destination(job, now)
    assert where.key == "{cw|q}:schedule" and where.listed


def test_a_priority_goes_to_the_queues_zset_stamped_now(prefix):
    now = time.time()
    job = built(queue="q", priority=7)
    where = route.destination(job, now, "text built before")
    assert (where.kind, where.key, where.score) == ("zset", keys.priority_queue("q"), -7.0)
    assert where.listed and job["enqueued_at"] == now
    assert where.value.endswith("|" + payload.encode(job))


def test_a_unique_job_locked_at_push_is_its_scripts_to_place(prefix):
    for mode in route.LOCKED_AT_PUSH:
        assert route.destination(built(queue="q", unique=mode), time.time()).kind == "unique"
    assert route.destination(built(queue="q", unique="while_executing"), time.time()).kind == "list"


def test_a_priority_push_lists_its_queue_as_every_push_does(r, caplog):
    # One writer: a priority's ZADD takes the listing, its refresh and its report with it
    # (it used to list at every push, and reported a broken listing at every push).
    listing.forget_all()
    assert client.push(built(queue="pq", priority=5))
    assert r.zcard(keys.priority_queue("pq")) == 1 and r.sismember(keys.queues(), "pq")
    r.srem(keys.queues(), "pq")
    assert client.push(built(queue="pq", priority=5))
    assert not r.sismember(keys.queues(), "pq")  # listed lately: not again until the refresh
    caplog.set_level(logging.ERROR, logger="cogworker_django")
    r.set(keys.queues(), "not a set")
    listing.forget_all()
    assert all(client.push(built(queue="pq", priority=5)) for _ in range(20))
    assert r.zcard(keys.priority_queue("pq")) == 22  # rule 1: every push went in
    assert len([x for x in caplog.records if "not updated" in x.getMessage()]) == 1


def test_a_move_to_the_queue_ignores_at_and_stamps_now(prefix):
    # to_queue: the poller's due jobs, the admin's "enqueue now", a limiter's waker.
    now = time.time()
    job = built(queue="q")
    job["at"] = now + 3600
    where = route.to_queue(job, now)
    assert (where.kind, where.key) == ("list", keys.queue("q")) and "at" not in job
    assert payload.decode(where.value)["enqueued_at"] == now and where.score_arg == ""
    high = route.to_queue(built(queue="q", priority=3), now)
    assert (high.kind, high.score_arg) == ("zset", "-3.0")


def test_placement_leaves_the_lock_to_its_caller(prefix):
    job = built(queue="q", unique="until_executed")
    assert route.placement(job, time.time()).kind == "list"
