"""System checks: settings, the Redis client's retry and timeout options, the retry
backoff hook; and, where asked for, Redis reachable, its version and eviction policy.

Only the last need the network, so they are deployment checks (``manage.py check
--deploy``; ``--deploy --tag cogworker_redis`` runs them alone) and the worker runs
them at boot: ``migrate``, ``runserver`` or ``manage.py test`` never wait for Redis, nor
fail because it is down. Every other check reads settings only. Neither the client nor
the Redis checks run in a ``TESTING`` mode (fake or inline), where nothing talks to Redis.
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from . import conf, connection, errors


@checks.register("cogworker")
def check_settings(app_configs=None, **kwargs):
    try:
        conf.get()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="cogworker.E001")]
    return []


@checks.register("cogworker")
def check_periodic(app_configs=None, **kwargs):
    """Every COGWORKER_PERIODIC entry (its job must be a registered @job)."""
    from .periodic import entries

    return entries.check_messages()


# The tag of the checks that talk to Redis: `manage.py check --deploy --tag cogworker_redis`.
REDIS_TAG = "cogworker_redis"


def _settings_or_none() -> conf.Settings | None:
    try:
        return conf.get()
    except ImproperlyConfigured:
        return None  # reported by check_settings


@checks.register("cogworker")
def check_client(app_configs=None, **kwargs):
    """The client jobs will use (built, not connected): automatic retries off and a
    socket timeout longer than a blocking fetch, whatever made it (the cache's too)."""
    s = _settings_or_none()
    if s is None or s.TESTING:
        return []
    return _client_or_message()[1]


def _client_or_message() -> tuple[Any, list[checks.CheckMessage]]:
    try:
        return connection.get_client(), []
    except ImproperlyConfigured as exc:
        return None, [checks.Error(str(exc), id="cogworker.E003")]
    except Exception as exc:  # noqa: BLE001 - a client that can't even be built
        message = (
            f"The Redis client for {connection.describe_target()} can't be built: "
            f"{errors.describe(exc)}"
        )
        return None, [checks.Error(message, id="cogworker.E003")]


@checks.register("cogworker")
def check_retry_backoff(app_configs=None, **kwargs):
    """RETRY_BACKOFF names something importable that takes the retry count."""
    if _settings_or_none() is None:
        return []
    try:
        conf.retry_backoff()
    except ImproperlyConfigured as exc:
        return [
            checks.Error(
                str(exc),
                hint="Point it at a function f(retry_count) -> seconds, or remove it to "
                "use the built-in backoff.",
                id="cogworker.E004",
            )
        ]
    return []


@checks.register("cogworker", REDIS_TAG, deploy=True)
def check_redis(app_configs=None, **kwargs):
    s = _settings_or_none()
    if s is None or s.TESTING:
        return []
    return redis_messages()


def redis_messages() -> list[checks.CheckMessage]:
    """Redis reachable, new enough, not evicting keys (this one talks to Redis)."""
    target = connection.describe_target()
    client, unfit = _client_or_message()
    if unfit:
        return unfit  # not contacted: it would retry, or wait too little or forever
    try:
        version = connection.server_version(client)
        policy = connection.maxmemory_policy(client)
    except Exception as exc:  # noqa: BLE001 - any failure here is the message
        return [
            checks.Error(
                f"Redis at {target} is unreachable: {errors.describe(exc)}",
                hint="Start Redis or set COGWORKER['REDIS_URL'] (or CACHE_ALIAS / SENTINELS).",
                id="cogworker.E002",
            )
        ]
    found: list[checks.CheckMessage] = []
    if version < connection.MIN_REDIS_VERSION:
        found.append(
            checks.Warning(
                f"Redis at {target} is version {'.'.join(map(str, version))}; cogworker needs 6.2+ "
                "for reliable fetch (workers fall back to basic fetch, which loses the jobs of a "
                "worker that dies).",
                id="cogworker.W001",
            )
        )
    if policy is not None and policy != "noeviction":
        found.append(
            checks.Warning(
                f"Redis at {target} has maxmemory-policy {policy!r}: under memory pressure it "
                "deletes keys, jobs included.",
                hint="Set maxmemory-policy to noeviction on the Redis that holds jobs.",
                id="cogworker.W002",
            )
        )
    return found
