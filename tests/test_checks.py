"""System checks and `manage.py check`: unreachable Redis is an error naming the URL
(password masked); an old Redis and an evicting maxmemory-policy are warnings. Those need
the network, so they run with `check --deploy` and in the worker, never before `migrate`,
`runserver` or `test`, and never in a TESTING mode. An unfit Redis client and a bad
RETRY_BACKOFF are errors of every `check`, found without the network. (The same errors
stopping the worker command: tests/worker/test_worker_command.py.)"""

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from redis.backoff import NoBackoff
from redis.retry import Retry

from cogworker_django import checks

from .helpers import MAIN_REDIS_URL, MANAGE, ROOT, free_port, run_command, wait_until


def ids(messages):
    return [m.id for m in messages]


# Private servers start with `--save "" --appendonly no` (tests/helpers.py): a healthy one
# keeps its data on disk, or cogworker.W004 says it does not (test_persistence.py).
PERSISTENT = ["--appendonly", "yes"]


def test_healthy_redis_has_no_messages(redis_server, configure):
    configure(REDIS_URL=redis_server(extra=PERSISTENT).url)
    assert checks.redis_messages() == []


def test_unreachable_redis_is_an_error_with_the_password_masked(configure):
    port = free_port()
    configure(
        REDIS_URL=f"redis://:hunter2@127.0.0.1:{port}/0",
        REDIS_OPTIONS={"socket_connect_timeout": 1},
    )
    [message] = checks.redis_messages()
    assert message.id == "cogworker.E002"
    assert f"127.0.0.1:{port}" in message.msg and "hunter2" not in message.msg
    assert "***" in message.msg


def test_evicting_policy_is_a_warning(redis_server, configure):
    server = redis_server(extra=["--maxmemory-policy", "allkeys-lru", *PERSISTENT])
    configure(REDIS_URL=server.url)
    messages = checks.redis_messages()
    assert ids(messages) == ["cogworker.W002"]
    assert "allkeys-lru" in messages[0].msg


def test_manage_py_check_passes_and_warns_on_allkeys_lru(redis_server, prefix):
    healthy = redis_server(extra=PERSISTENT)
    ok = run_command(prefix, "check", "--deploy", "--tag", checks.REDIS_TAG, redis_url=healthy.url)
    assert ok.returncode == 0, ok.stderr
    assert "no issues" in ok.stdout
    server = redis_server(extra=["--maxmemory-policy", "allkeys-lru"])
    warned = run_command(prefix, "check", "--deploy", redis_url=server.url)
    assert warned.returncode == 0
    assert "cogworker.W002" in warned.stderr + warned.stdout


def test_manage_py_check_fails_on_bad_settings(prefix):
    result = run_command(prefix, "check", settings={"CONCURRENCY": 0})
    assert result.returncode != 0
    assert "CONCURRENCY" in result.stderr


# Redis down: only the worker and `check --deploy` need it ----------------------------------


@pytest.fixture
def down_url():
    """A Redis URL where nothing listens (a free port), password included."""
    return f"redis://:hunter2@127.0.0.1:{free_port()}/0"


@pytest.fixture
def db_env():
    with tempfile.TemporaryDirectory(prefix="cogworker-db-") as tmp:
        yield {"TESTPROJECT_DB": str(Path(tmp) / "db.sqlite3")}


@pytest.mark.parametrize("testing", [None, "fake", "inline"])
def test_migrate_check_and_test_start_with_redis_down(prefix, down_url, db_env, testing):
    settings = {"TESTING": testing} if testing else {}
    for command in (["migrate"], ["check"], ["test", "demo"]):
        done = run_command(prefix, *command, redis_url=down_url, settings=settings, env=db_env)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert "cogworker.E002" not in done.stdout + done.stderr
        assert "unreachable" not in done.stdout + done.stderr


def test_runserver_starts_with_redis_down(prefix, down_url, db_env):
    import json
    import os

    port = free_port()
    env = {
        **os.environ,
        **db_env,
        "COGWORKER_PREFIX": prefix,
        "COGWORKER_REDIS_URL": down_url,
        "COGWORKER_SETTINGS_JSON": json.dumps({}),
    }
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [sys.executable, str(MANAGE), "runserver", "--noreload", f"127.0.0.1:{port}"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
        )
        try:

            def started():
                out.seek(0)
                text = out.read().decode(errors="replace")
                assert proc.poll() is None, text
                return "Quit the server with" in text

            wait_until(started, 60, 0.1, message="runserver to start")
        finally:
            proc.kill()
            proc.wait(10)


def test_check_deploy_reports_redis_down(prefix, down_url):
    for args in (["--deploy"], ["--deploy", "--tag", checks.REDIS_TAG]):
        done = run_command(prefix, "check", *args, redis_url=down_url)
        assert done.returncode == 1, done.stdout
        assert "cogworker.E002" in done.stderr
        assert "hunter2" not in done.stderr and "***" in done.stderr


def test_the_redis_check_reports_a_malformed_url(prefix):
    done = run_command(
        prefix, "check", "--deploy", "--tag", checks.REDIS_TAG, redis_url="localhost:6379"
    )
    assert done.returncode == 1, done.stdout
    assert "cogworker.E001" in done.stderr and "REDIS_URL" in done.stderr


def test_check_deploy_checks_redis_when_testing_asks_for_it(prefix, down_url):
    done = run_command(
        prefix, "check", "--deploy", redis_url=down_url, settings={"TESTING": "redis"}
    )
    assert done.returncode == 1 and "cogworker.E002" in done.stderr


@pytest.mark.parametrize("testing", ["fake", "inline"])
def test_check_deploy_leaves_redis_alone_in_a_testing_mode(prefix, down_url, testing):
    done = run_command(
        prefix, "check", "--deploy", redis_url=down_url, settings={"TESTING": testing}
    )
    assert done.returncode == 0, done.stderr
    assert "cogworker.E002" not in done.stdout + done.stderr


def test_redis_checks_are_deployment_checks():
    from django.core.checks.registry import registry

    deploy_only = set(registry.get_checks(True)) - set(registry.get_checks(False))
    assert checks.check_redis in deploy_only
    assert checks.REDIS_TAG in checks.check_redis.tags


# The Redis client: retries off, a socket timeout longer than a blocking fetch -------------


def unfit_cache(settings, **pool_kwargs):
    from django_redis.pool import ConnectionFactory

    ConnectionFactory._pools.clear()  # django-redis keeps one pool per URL and process
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "jobs": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": MAIN_REDIS_URL,
            "OPTIONS": {"CONNECTION_POOL_KWARGS": pool_kwargs},
        },
    }


def test_an_unfit_cache_client_is_an_error_without_contacting_redis(settings, configure):
    unfit_cache(settings, retry=Retry(NoBackoff(), 3), socket_timeout=None)
    configure(CACHE_ALIAS="jobs")
    [message] = checks.check_client()
    assert message.id == "cogworker.E003"
    assert "CACHES['jobs']" in message.msg
    assert "socket_timeout is None" in message.msg and "up to 3 time" in message.msg
    # the deployment check does not talk through it either
    assert ids(checks.redis_messages()) == ["cogworker.E003"]


def test_a_fit_client_has_no_message(settings, configure):
    assert checks.check_client() == []
    unfit_cache(settings, retry=Retry(NoBackoff(), 0))
    configure(CACHE_ALIAS="jobs")
    assert checks.check_client() == []


def test_the_client_is_not_checked_in_a_testing_mode(settings, configure):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    configure(CACHE_ALIAS="default")  # not django-redis: an error outside testing
    assert ids(checks.check_client()) == ["cogworker.E003"]
    configure(TESTING="fake")
    assert checks.check_client() == []
    assert checks.check_redis() == []


# RETRY_BACKOFF -----------------------------------------------------------------------------


def test_retry_backoff_check(configure):
    assert checks.check_retry_backoff() == []
    configure(RETRY_BACKOFF="testapp.jobs.backoff_2s")
    assert checks.check_retry_backoff() == []
    configure(RETRY_BACKOFF="testapp.jobs.no_such_hook")
    [message] = checks.check_retry_backoff()
    assert message.id == "cogworker.E004"
    assert (
        "COGWORKER['RETRY_BACKOFF'] = 'testapp.jobs.no_such_hook' can't be imported" in message.msg
    )
