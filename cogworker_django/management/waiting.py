"""A worker started while Redis does not answer waits for it (``manage.py cogworker``):
in Docker Compose or Kubernetes a worker may start before its Redis, and exiting would
leave it to a restart policy's back-off (a crash loop). Only the worker waits: ``check``
and the other commands report an unreachable Redis at once.

One log line when Redis first does not answer, then one every
:data:`REDIS_WAIT_LOG_EVERY` seconds; TERM or INT meanwhile exits at once.
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

from cogworker_django import checks
from cogworker_django.store import connection, errors

log = logging.getLogger("cogworker_django")

# Asked again this often (a connect attempt costs nothing), and said this often that it
# is still waiting (one line, not one per attempt).
REDIS_WAIT_RETRY = 1.0
REDIS_WAIT_LOG_EVERY = 30.0


def waits_for(exc: BaseException) -> bool:
    """True when a failed first ``ping`` is worth waiting out: Redis not answering (not
    yet started, restarting, loading its data), not Redis refusing the credentials or the
    database index (waiting would not change those)."""
    if checks.refused_credentials(exc) or "DB index is out of range" in errors.safe_str(exc):
        return False
    return errors.is_unavailable(exc)


def wait_for_redis(ping, retry: float = REDIS_WAIT_RETRY) -> str | None:
    """``ping()`` until it answers (then None): one log line when Redis first does not,
    then one every REDIS_WAIT_LOG_EVERY seconds. TERM or INT meanwhile ends the wait at
    once, even inside a connect: the signal's name is returned. A failure not worth
    waiting for (:func:`waits_for`) is raised."""
    received: list[str] = []

    def stop(signum: int, _frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        # SystemExit: a BaseException, so no ``except Exception`` on the way (redis-py's,
        # or this module's) takes it for a failed attempt.
        raise SystemExit(0)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _wait(ping, retry)
    except SystemExit:
        if received:
            return received[0]
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return None


def _wait(ping, retry: float) -> None:
    started = said = time.monotonic()
    target = ""
    while True:
        try:
            ping()
        except Exception as exc:
            if not waits_for(exc):
                raise
            if not target:
                target = connection.describe_target()
                log.warning(
                    "Redis at %s is unreachable (%s): waiting for it (asking every %g s; "
                    "TERM exits)",
                    target,
                    errors.describe(exc),
                    retry,
                )
            elif time.monotonic() - said >= REDIS_WAIT_LOG_EVERY:
                said = time.monotonic()
                log.warning(
                    "still waiting for Redis at %s (%.0f s): %s",
                    target,
                    said - started,
                    errors.describe(exc),
                )
            time.sleep(retry)
            continue
        if target:
            log.info(
                "Redis at %s answered after %.0f s: starting", target, time.monotonic() - started
            )
        return
