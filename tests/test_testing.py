"""testing.fake(), testing.inline(), drain(), per-job lists and the pytest fixtures."""

import pytest
from testapp import jobs as tj

from cogworker_django import testing
from cogworker_django.store import keys


def test_fake_records_instead_of_pushing(r, prefix):
    with testing.fake():
        jid = tj.record.enqueue("a")
        tj.slow.enqueue(0)
        assert [j["jid"] for j in tj.record.jobs] == [jid]
        assert len(testing.recorded()) == 2
        assert r.llen(keys.queue("default")) == 0
        tj.record.perform_one()
        assert r.hget(f"{prefix}:test:runs", "a") == "1"
        assert tj.record.jobs == []
        assert testing.drain() == 1
    assert testing.recorded() == []


def test_fake_refuses_what_a_real_push_refuses():
    with (
        testing.fake(),
        pytest.raises(
            TypeError, match=r"^testapp\.jobs\.record: positional argument 0 \(object\) is not JSON"
        ),
    ):
        tj.record.enqueue(object())


def test_drain_runs_jobs_they_enqueue(prefix, r):
    with testing.fake():
        tj.record.enqueue_many([("x",), ("y",)])
        assert tj.record.drain() == 2
        assert r.hlen(f"{prefix}:test:runs") == 2


def test_perform_one_with_nothing_recorded():
    with testing.fake(), pytest.raises(LookupError):
        tj.record.perform_one()


def test_inline_runs_at_enqueue_and_raises(prefix, r):
    with testing.inline():
        tj.record.enqueue("now")
        tj.async_record.enqueue("async-now")
        with pytest.raises(ValueError, match="boom"):
            tj.always_fails.enqueue()
    assert r.hget(f"{prefix}:test:runs", "now") == "1"
    assert r.hget(f"{prefix}:test:runs", "async-now") == "1"


def test_testing_setting(configure, r):
    configure(TESTING="fake")
    tj.record.enqueue("set-by-setting")
    assert len(tj.record.jobs) == 1
    assert r.llen(keys.queue("default")) == 0


def test_cogworker_fake_fixture(cogworker_fake, r):
    tj.record.enqueue("fixture")
    assert len(tj.record.jobs) == 1
    assert cogworker_fake.drain() == 1


def test_cogworker_inline_fixture(cogworker_inline, prefix, r):
    tj.record.enqueue("inline-fixture")
    assert r.hget(f"{prefix}:test:runs", "inline-fixture") == "1"
