"""A test run keeps its jobs: under the pytest plugin and ``manage.py test`` an enqueue with
no TESTING mode is recorded, never pushed to the Redis of COGWORKER, unless a test asks
for Redis (the ``cogworker_redis`` marker or fixture, ``TESTING = "redis"``).

Each case runs a tiny project of its own in a fresh subprocess, as a user's would run
(this suite itself opts in to Redis with ``cogworker_redis = true`` in pyproject.toml).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from cogworker_django import testing
from cogworker_django.core import client, testrun

from ..helpers import MAIN_REDIS_URL, wait_until

SETTINGS = textwrap.dedent(
    """
    import os

    SECRET_KEY = "sample"
    INSTALLED_APPS = ["django.contrib.contenttypes", "cogworker_django", "shop"]
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    USE_TZ = True
    COGWORKER = {"REDIS_URL": os.environ["SAMPLE_REDIS_URL"],
                 "PREFIX": os.environ["SAMPLE_PREFIX"]}
    """
)

JOBS = textwrap.dedent(
    """
    import os

    import redis
    from cogworker_django import job


    @job
    def mark_paid(order_id):
        # What a run did, seen from outside: a list of the order ids it marked.
        r = redis.Redis.from_url(os.environ["SAMPLE_REDIS_URL"])
        r.rpush("ran:" + os.environ["SAMPLE_PREFIX"], order_id)
        return order_id
    """
)

# What a newcomer writes: an enqueue in a test, no fake() or inline() anywhere.
PYTEST_TESTS = textwrap.dedent(
    """
    import pytest

    from shop.jobs import mark_paid


    def test_checkout():
        assert mark_paid.enqueue(1)
        assert len(mark_paid.jobs) == 1   # recorded, as in testing.fake()


    def test_next_test_starts_with_an_empty_record():
        assert mark_paid.jobs == []
        mark_paid.enqueue(2)


    @pytest.mark.django_db
    def test_with_the_database():
        mark_paid.enqueue(3)


    @pytest.mark.cogworker_redis
    def test_marked_pushes_to_redis():
        mark_paid.enqueue(100)
        assert mark_paid.jobs == []


    def test_the_fixture_pushes_to_redis(cogworker_redis):
        mark_paid.enqueue(101)


    def test_keys_are_under_a_test_prefix_of_their_own():
        import os
        from cogworker_django import testing

        assert testing.prefix() == "test_" + os.environ["SAMPLE_PREFIX"]
    """
)

DJANGO_TESTS = textwrap.dedent(
    """
    from django.test import SimpleTestCase, TestCase, override_settings
    from django.conf import settings

    from shop.jobs import mark_paid


    class Checkout(TestCase):
        def test_checkout(self):
            self.assertTrue(mark_paid.enqueue(1))
            self.assertEqual(len(mark_paid.jobs), 1)


    class AsksForRedis(SimpleTestCase):
        def test_the_setting_pushes_to_redis(self):
            with override_settings(COGWORKER={**settings.COGWORKER, "TESTING": "redis"}):
                mark_paid.enqueue(102)
    """
)


@pytest.fixture
def sample(tmp_path, prefix, r):
    """A project with one app (shop) and one job, run in a subprocess: returns
    run(*argv) -> CompletedProcess, and the jobs that reached its Redis."""
    (tmp_path / "sampleproj").mkdir()
    (tmp_path / "sampleproj" / "__init__.py").write_text("")
    (tmp_path / "sampleproj" / "settings.py").write_text(SETTINGS)
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "jobs.py").write_text(JOBS)
    (tmp_path / "shop" / "tests.py").write_text(DJANGO_TESTS)
    (tmp_path / "test_shop.py").write_text(PYTEST_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nDJANGO_SETTINGS_MODULE = sampleproj.settings\n")
    (tmp_path / "manage.py").write_text(
        "import os, sys\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'sampleproj.settings')\n"
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_SETTINGS"))}
    env.update(SAMPLE_REDIS_URL=MAIN_REDIS_URL, SAMPLE_PREFIX=prefix, PYTHONPATH=str(tmp_path))

    def run(*argv: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    def pushed(under: str = f"test_{prefix}") -> list[int]:
        """The jobs on the default queue under ``under``: the test prefix by default
        (the sample's runs are neither xdist nor parallel: no worker number)."""
        import json

        return sorted(json.loads(p)["args"][0] for p in r.lrange(f"{under}:queue:default", 0, -1))

    run.pushed = pushed  # type: ignore[attr-defined]
    run.env = env  # type: ignore[attr-defined]
    run.dir = tmp_path  # type: ignore[attr-defined]
    yield run
    for key in r.scan_iter(match=f"test_{prefix}*"):
        r.delete(key)
    r.delete(f"ran:{prefix}")


def test_pytest_run_keeps_jobs_unless_a_test_asks_for_redis(sample):
    done = sample("-m", "pytest", "-p", "no:cacheprovider", "-q", "test_shop.py")
    assert "6 passed" in done.stdout
    # Only the marked test and the one with the fixture reached Redis.
    assert sample.pushed() == [100, 101]


def test_manage_py_test_keeps_jobs_unless_a_test_asks_for_redis(sample):
    sample("manage.py", "test", "shop", "-v", "0")
    assert sample.pushed() == [102]
    assert sample.pushed(under=sample.env["SAMPLE_PREFIX"]) == []  # not the project's PREFIX


def test_a_development_worker_never_sees_a_test_runs_jobs(sample, r):
    """The sample project's development worker runs on its PREFIX while its pytest run
    pushes jobs to Redis (the cogworker_redis marker and fixture): they go under the test
    prefix ("test_" + PREFIX), where no development worker reads, and it runs none."""
    prefix = sample.env["SAMPLE_PREFIX"]
    log = sample.dir / "worker.log"
    with open(log, "wb") as out:
        dev = subprocess.Popen(
            [sys.executable, "manage.py", "cogworker", "-c", "2"],
            cwd=sample.dir,
            env=sample.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: "started" in log.read_text(), 30, message="the development worker")
        assert f"prefix={prefix}" in log.read_text()
        done = sample("-m", "pytest", "-p", "no:cacheprovider", "-q", "test_shop.py")
        assert "6 passed" in done.stdout
        assert sample.pushed() == [100, 101]  # waiting under the test prefix
        # The development worker fetches within a second of a push; give it two.
        time.sleep(2)
        assert r.lrange(f"ran:{prefix}", 0, -1) == []
        assert sample.pushed(under=prefix) == []
        # The same job pushed under PREFIX does run there: the worker was looking.
        env = {**sample.env, "DJANGO_SETTINGS_MODULE": "sampleproj.settings"}
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import django; django.setup(); "
                "from shop.jobs import mark_paid; mark_paid.enqueue(7)",
            ],
            cwd=sample.dir,
            env=env,
            check=True,
            timeout=60,
        )
        wait_until(lambda: r.lrange(f"ran:{prefix}", 0, -1) == ["7"], 15, message="a dev job")
    finally:
        dev.terminate()
        dev.wait(30)


# The same rules, in this process (whose suite opts in with cogworker_redis = true).


@pytest.fixture
def a_test_run():
    """This process as a user's pytest run: the session default is "fake"."""
    testrun.set_session_default("fake")
    try:
        yield
    finally:
        testrun.set_session_default("redis")


def test_explicit_modes_and_asking_for_redis_win_over_the_default(a_test_run, configure):
    assert client.active_sink() is not None  # the default: recorded
    with testrun.real_redis():
        assert client.active_sink() is None
        with testing.inline():
            assert client.active_sink() is not None  # an explicit block still wins
    configure(TESTING="redis")
    assert client.active_sink() is None
    configure(TESTING="inline")
    assert client.active_sink() is not None
    with testrun.real_redis():
        assert client.active_sink() is None  # a marked test wins over the setting


def test_outside_a_test_run_jobs_go_to_redis():
    testrun.set_session_default(None)
    try:
        from django.core import mail

        outbox = mail.__dict__.pop("outbox", None)
        try:
            assert client.active_sink() is None
        finally:
            if outbox is not None:
                mail.outbox = outbox
    finally:
        testrun.set_session_default("redis")


NOT_INSTALLED = textwrap.dedent(
    """
    import django
    from django.conf import settings

    settings.configure(INSTALLED_APPS=[], COGWORKER={"REDIS_URL": %r, "PREFIX": %r})
    django.setup()

    from cogworker_django import job


    @job
    def mark_paid(order_id):
        pass


    try:
        mark_paid.enqueue(1)
    except Exception as exc:
        print(type(exc).__name__, exc)
    """
)


def test_enqueue_refuses_when_the_app_is_not_installed(prefix, r):
    done = subprocess.run(
        [sys.executable, "-c", NOT_INSTALLED % (MAIN_REDIS_URL, prefix)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("DJANGO_SETTINGS")},
    )
    assert done.stdout.startswith("NotInstalled cogworker_django is not in INSTALLED_APPS"), (
        done.stdout + done.stderr
    )
    assert r.keys(f"{prefix}:*") == []
