"""A Redis that keeps nothing on disk (neither RDB snapshots nor AOF): `manage.py check
--deploy` warns (cogworker.W004), the admin dashboard shows it; a Redis with either is
fine. (The worker command logs it at boot: tests/worker/test_worker_command.py.)"""

from __future__ import annotations

import pytest

from cogworker_django import checks
from cogworker_django.api import RedisServer

from .admin_support import fast_passwords_fixture, url  # noqa: F401 - autouse fixture
from .helpers import run_command

# tests/helpers.RedisServer starts servers with `--save "" --appendonly no`; later
# arguments win.
AOF = ["--appendonly", "yes"]
RDB = ["--save", "3600 1"]


def test_no_persistence_is_a_warning(redis_server, configure):
    server = redis_server()
    configure(REDIS_URL=server.url)
    assert RedisServer().persistence().none
    [message] = checks.redis_messages()
    assert message.id == "cogworker.W004"
    assert "keeps nothing on disk" in message.msg and "appendonly yes" in message.hint


@pytest.mark.parametrize("extra", [AOF, RDB], ids=["aof", "rdb"])
def test_aof_or_snapshots_are_enough(redis_server, configure, extra):
    server = redis_server(extra=extra)
    configure(REDIS_URL=server.url)
    kept = RedisServer().persistence()
    assert not kept.none and (kept.aof or kept.rdb)
    assert checks.redis_messages() == []


def test_config_refused_says_nothing(redis_server, configure):
    server = redis_server(extra=["--rename-command", "CONFIG", ""])
    configure(REDIS_URL=server.url)
    kept = RedisServer().persistence()
    assert kept.rdb is None and kept.aof is False and not kept.none
    assert [m.id for m in checks.redis_messages()] == []


def test_manage_py_check_deploy_warns(redis_server, prefix):
    server = redis_server()
    result = run_command(
        prefix, "check", "--deploy", "--tag", checks.REDIS_TAG, redis_url=server.url
    )
    assert result.returncode == 0
    assert "cogworker.W004" in result.stdout + result.stderr


@pytest.mark.django_db
@pytest.mark.parametrize("extra,shown", [([], True), (AOF, False)], ids=["none", "aof"])
def test_the_dashboard_shows_it(admin_client, redis_server, configure, extra, shown):
    server = redis_server(extra=extra)
    configure(REDIS_URL=server.url)
    html = admin_client.get(url("dashboard")).content.decode()
    assert ('id="cw-no-persistence"' in html) is shown
