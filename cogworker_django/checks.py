"""System checks: settings, Redis reachable, Redis version and eviction policy."""

from __future__ import annotations

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


@checks.register("cogworker", deploy=False)
def check_redis(app_configs=None, **kwargs):
    try:
        conf.get()
    except ImproperlyConfigured:
        return []  # reported by check_settings
    return redis_messages()


def redis_messages() -> list[checks.CheckMessage]:
    target = connection.describe_target()
    try:
        client = connection.get_client()
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
