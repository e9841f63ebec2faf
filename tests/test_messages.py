"""What a newcomer reads when something is wrong: `manage.py check` reports a bad
COGWORKER as cogworker.E001 on its own (no traceback), with a did-you-mean for a
misspelt key; refused credentials are called that, not "unreachable" (in the checks
and the admin; the worker command: tests/worker/test_worker_command.py); no message ends
in two periods."""

from __future__ import annotations

import pytest

from cogworker_django import checks

from .admin_support import fast_passwords_fixture, url  # noqa: F401 - autouse fixture
from .helpers import free_port, run_command


def test_check_reports_a_bad_setting_as_e001_without_a_traceback(prefix):
    result = run_command(prefix, "check", settings={"CONCURENCY": 5})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "cogworker.E001" in output
    assert "Traceback" not in output
    assert "'CONCURENCY' (did you mean 'CONCURRENCY'?)" in output


def test_check_reports_a_bad_url_scheme_as_e001(prefix):
    result = run_command(prefix, "check", settings={"REDIS_URL": "http://127.0.0.1:6379/0"})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "cogworker.E001" in output and "Traceback" not in output
    assert "redis://, rediss://, unix://" in output
    assert "unreachable" not in output


@pytest.fixture
def locked_redis(redis_server):
    server = redis_server()
    server.client().config_set("requirepass", "s3cret-pw")  # after start: it pings without
    return server


@pytest.mark.parametrize("password", ["", "wrong-pw"])
def test_refused_credentials_are_not_called_unreachable(locked_redis, configure, password):
    auth = f":{password}@" if password else ""
    configure(REDIS_URL=f"redis://{auth}127.0.0.1:{locked_redis.port}/0")
    [message] = checks.redis_messages()
    assert message.id == "cogworker.E002"
    assert "refused cogworker's credentials" in message.msg and "unreachable" not in message.msg
    assert "password" in message.hint and "Start Redis" not in message.hint
    assert "wrong-pw" not in message.msg
    assert not message.msg.endswith("..")


def test_an_unreachable_redis_message_has_one_period(configure):
    configure(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    [message] = checks.redis_messages()
    assert "is unreachable" in message.msg and ".." not in message.msg


@pytest.mark.django_db
def test_the_admin_says_the_credentials_were_refused(admin_client, locked_redis, configure):
    configure(REDIS_URL=f"redis://:wrong-pw@127.0.0.1:{locked_redis.port}/0")
    response = admin_client.get(url("deadjob"))
    assert response.status_code == 503
    html = response.content.decode()
    assert "refused the credentials" in html and "wrong-pw" not in html


@pytest.mark.django_db
def test_the_admin_outage_page_ends_its_sentence_once(admin_client, configure):
    configure(
        REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
        REDIS_OPTIONS={"socket_connect_timeout": 1},
    )
    html = admin_client.get(url("deadjob")).content.decode()
    note = html.split('id="cw-redis-error">')[1].split("</p>")[0]
    assert "Redis is unavailable" in note and ".." not in note
