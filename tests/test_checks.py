"""System checks and `manage.py check`: unreachable Redis is an error naming the URL
(password masked); an old Redis and an evicting maxmemory-policy are warnings."""

from cogworker_django import checks

from .helpers import free_port, run_command


def ids(messages):
    return [m.id for m in messages]


def test_healthy_redis_has_no_messages():
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
    server = redis_server(extra=["--maxmemory-policy", "allkeys-lru"])
    configure(REDIS_URL=server.url)
    messages = checks.redis_messages()
    assert ids(messages) == ["cogworker.W002"]
    assert "allkeys-lru" in messages[0].msg


def test_manage_py_check_passes_and_warns_on_allkeys_lru(redis_server, prefix):
    ok = run_command(prefix, "check")
    assert ok.returncode == 0, ok.stderr
    server = redis_server(extra=["--maxmemory-policy", "allkeys-lru"])
    warned = run_command(prefix, "check", redis_url=server.url)
    assert warned.returncode == 0
    assert "cogworker.W002" in warned.stderr + warned.stdout


def test_manage_py_check_fails_on_bad_settings(prefix):
    result = run_command(prefix, "check", settings={"CONCURRENCY": 0})
    assert result.returncode != 0
    assert "CONCURRENCY" in result.stderr
