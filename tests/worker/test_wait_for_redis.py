"""Only the worker waits for an unreachable Redis: ``check`` and the other commands do
not, and only an outage is waited for. (The worker command waiting, and TERM or INT
while it waits, with real processes: tests/worker/test_worker_command.py.)"""

from __future__ import annotations

import time

from cogworker_django.management import waiting as command

from ..helpers import free_port, run_command


def test_check_and_other_commands_do_not_wait(prefix):
    down = f"redis://127.0.0.1:{free_port()}/0"
    for args in (["check", "--deploy"], ["cogworker_status"]):
        started = time.monotonic()
        done = run_command(prefix, *args, redis_url=down, timeout=60)
        assert done.returncode != 0, (args, done.stdout, done.stderr)
        assert "unreachable" in done.stdout + done.stderr, (args, done.stdout, done.stderr)
        assert "waiting for it" not in done.stdout + done.stderr
        assert time.monotonic() - started < 20


def test_waits_for_only_an_outage():
    import redis

    assert command.waits_for(redis.ConnectionError("Connection refused"))
    assert command.waits_for(redis.BusyLoadingError("LOADING Redis is loading"))
    assert not command.waits_for(redis.AuthenticationError("invalid password"))
    assert not command.waits_for(redis.ResponseError("ERR DB index is out of range"))
    assert not command.waits_for(ValueError("bad"))
