"""A job's arguments are checked against its function's signature: at enqueue (the
TypeError a direct call raises, nothing pushed), and at run time for a payload that
doesn't fit (a job enqueued before its function changed), which goes to dead without a
retry. A TypeError raised inside the job's body is an ordinary failure."""

from __future__ import annotations

import json

import pytest
from testapp import jobs as tj

from cogworker_django import BadArguments, testing
from cogworker_django.store import keys

from ..api_support import make_job, push
from ..helpers import wait_until


def _queued(r) -> int:
    return r.llen(keys.queue("default"))


@pytest.mark.parametrize(
    "enqueue",
    [
        lambda: tj.record.enqueue(1, 2, 3),
        lambda: tj.record.enqueue(colour="red"),
        lambda: tj.slow.enqueue(),  # a missing argument
        lambda: tj.record.enqueue_in(60, 1, 2),
        lambda: tj.record.using(queue="low").enqueue(1, 2),
        lambda: tj.record.enqueue_many([("a",), ("b", "c")]),
        lambda: tj.record.enqueue_many([{"token": "a"}, {"colour": "b"}]),
        lambda: tj.async_record.enqueue(1, 2),
    ],
)
def test_enqueue_refuses_arguments_the_function_does_not_take(enqueue, r):
    with pytest.raises(TypeError) as caught:
        enqueue()
    assert isinstance(caught.value, BadArguments)
    assert "testapp.jobs." in str(caught.value) and "does not take these arguments" in str(
        caught.value
    )
    assert _queued(r) == 0 and r.zcard(keys.schedule(keys.home_of("default"))) == 0


def test_the_message_names_the_signature_and_the_reason(r):
    with pytest.raises(TypeError, match=r"testapp\.jobs\.record\(token=None\) .*too many"):
        tj.record.enqueue(1, 2)


def test_fitting_arguments_are_pushed(r):
    tj.record.enqueue("a")
    tj.record.enqueue(token="b")
    tj.record.enqueue_many([("c",), {"token": "d"}])
    assert _queued(r) == 4


def test_the_test_modes_check_too():
    with testing.fake(), pytest.raises(BadArguments):
        tj.record.enqueue(1, 2)
    with testing.inline(), pytest.raises(BadArguments):
        tj.record.enqueue(1, 2)


def _dead(r) -> list[dict]:
    return [json.loads(m) for m in r.zrange(keys.dead(keys.home_of("default")), 0, -1)]


def test_a_payload_the_function_cannot_take_goes_to_dead_without_a_retry(inworker, r, prefix):
    job = make_job("testapp.jobs.record", "a", "b", "c")  # record(token=None)
    push(r, job)
    w = inworker()
    (dead,) = wait_until(lambda: _dead(r), 15, message="in dead")
    assert dead["jid"] == job["jid"]
    assert dead["retry_count"] == 1
    assert dead["error_class"] == "cogworker_django.core.jobs.BadArguments"
    assert "does not take these arguments: too many positional arguments" in (dead["error_message"])
    assert r.zcard(keys.retry(keys.home_of("default"))) == 0
    w.stop()


def test_a_type_error_from_the_body_is_retried(inworker, r, prefix):
    jid = tj.type_error_inside.enqueue("inside")
    w = inworker()
    (entry,) = wait_until(
        lambda: [json.loads(m) for m in r.zrange(keys.retry(keys.home_of("default")), 0, -1)],
        15,
        message="in retry",
    )
    assert entry["jid"] == jid and entry["error_class"] == "TypeError"
    assert _dead(r) == []
    w.stop()
