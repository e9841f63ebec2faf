"""System checks: settings, the Redis client's retry and timeout options, the retry
backoff hook, jobs defined where no worker imports them; and, where asked for, Redis
reachable, its version, eviction policy and persistence.

Only the last need the network, so they are deployment checks (``manage.py check
--deploy``; ``--deploy --tag cogworker_redis`` runs them alone) and the worker runs
them at boot: ``migrate``, ``runserver`` or ``manage.py test`` never wait for Redis, nor
fail because it is down. Every other check reads settings only. Neither the client nor
the Redis checks run in a ``TESTING`` mode (fake or inline), where nothing talks to Redis.
"""

from __future__ import annotations

import difflib
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from . import conf
from .store import cluster, connection, errors

# The tag of the checks that talk to Redis: `manage.py check --deploy --tag cogworker_redis`.
REDIS_TAG = "cogworker_redis"


# Tagged for Redis too: the connection check runs on the settings' values, and says
# nothing when they are invalid (`check --deploy --tag cogworker_redis` must not pass a
# malformed REDIS_URL).
@checks.register("cogworker", REDIS_TAG)
def check_settings(app_configs=None, **kwargs):
    try:
        conf.get()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="cogworker.E001")]
    return []


# The commands a bad periodic entry stops (with cogworker.E101): the one that would run
# it, and the one that checks. Any other (migrate, runserver, shell, test) only warns
# (cogworker.W101): none of them runs periodic entries, and migrate must work while the
# entry is being fixed.
PERIODIC_STOPS = ("check", "cogworker")


@checks.register("cogworker")
def check_periodic(app_configs=None, **kwargs):
    """Every COGWORKER_PERIODIC entry (its job must be a registered @job)."""
    from .core.commandline import management_command
    from .periodic import entries

    found = entries.check_messages()
    command = management_command()
    if not found or command is None or command in PERIODIC_STOPS:
        return found
    return [
        checks.Warning(
            m.msg,
            hint=f"`manage.py check` and the worker refuse it; `{command}` goes on.",
            id="cogworker.W101",
        )
        for m in found
    ]


@checks.register("cogworker", checks.Tags.database)
def check_periodic_database(app_configs=None, databases=None, **kwargs):
    """Every database periodic entry that a worker would not run (its job gone in a deploy,
    a cron line a newer croniter refuses): a warning each, ``cogworker.W102``, never an
    error: ``migrate`` must work, and the workers run the other entries. Only when the
    command gives databases (``migrate``, ``check --database``): it reads the table."""
    if not databases:
        return []
    from django.db import router

    from .core import jobs
    from .periodic import source

    try:
        jobs.import_job_modules()
    except jobs.JobModuleError:
        return []  # cogworker.E006
    from .models import PeriodicEntry

    alias = router.db_for_read(PeriodicEntry)
    if alias not in databases:
        return []
    try:
        if not source.has_table(alias):
            return []  # before its migration
        rows = list(PeriodicEntry.objects.using(alias).all())
    except Exception:  # noqa: BLE001 - an unreachable database is not this check's to say
        return []
    found = []
    for row in rows:
        try:
            row.entry()
        except ImproperlyConfigured as exc:
            found.append(
                checks.Warning(
                    f"periodic entry {row.name!r} of the database is not run: "
                    + str(exc).replace("COGWORKER_PERIODIC", "PeriodicEntry"),
                    hint="Fix it on the admin's Periodic schedule page (or delete it).",
                    obj=f"PeriodicEntry {row.name!r}",
                    id="cogworker.W102",
                )
            )
    return found


@checks.register("cogworker")
def check_job_modules(app_configs=None, **kwargs):
    """Every job module imports (``cogworker.E006`` otherwise, naming it and its file),
    and no ``@job`` is defined in a module no worker imports at start (its payloads would
    go to dead as "not registered"; ``cogworker.W003``). Workers import the installed
    apps' ``jobs`` and ``tasks`` modules and ``COGWORKER["JOB_MODULES"]``
    (jobs.job_module_names) after Django's own start-up; a job is fine when its module is
    one of those, or was imported by one of them or by the start-up. The URLconf is
    loaded first, so jobs defined in views (or imported by them) are seen."""
    if _settings_or_none() is None:
        return []
    from .core import jobs

    try:
        jobs.import_job_modules()
    except jobs.JobModuleError as exc:
        return [checks.Error(str(exc), id="cogworker.E006")]
    try:
        _load_urlconf()
    except Exception:  # noqa: BLE001 - an import error: Django's own URL checks say it
        return []
    roots = tuple(dotted for dotted, _required in jobs.job_module_names())

    def imported_by_workers(name: str) -> bool:
        return name == "django.setup" or any(
            name == root or name.startswith(root + ".") for root in roots
        )

    found = []
    for fn in jobs.registered_jobs():
        chain = (fn.__module__, *fn.imported_by)
        if any(imported_by_workers(name) for name in chain):
            continue
        found.append(
            checks.Warning(
                f"@job {fn.path} is defined in {fn.__module__}, which a worker does not "
                f"import: {jobs.where_jobs_live()}; its jobs would go to dead as not "
                "registered.",
                hint=f"Move it to a jobs.py or tasks.py module of an installed app, import "
                f"{fn.__module__} from one, or add {fn.__module__!r} to "
                "COGWORKER['JOB_MODULES'].",
                obj=fn.path,
                id="cogworker.W003",
            )
        )
    return found


@checks.register("cogworker")
def check_job_queues(app_configs=None, **kwargs):
    """A ``@job`` whose queue is in no ``COGWORKER["QUEUES"]``: a worker started without
    ``-q <queue>`` never runs it (its jobs wait for ever); ``cogworker.W005``, as the
    django.tasks backend's W010 for its queues."""
    s = _settings_or_none()
    if s is None:
        return []
    from .core import jobs

    try:
        jobs.import_job_modules()
    except jobs.JobModuleError:
        return []  # cogworker.E006
    read = set(s.queue_names)
    found = []
    for fn in jobs.registered_jobs():
        queue = fn.options.get("queue")
        if queue in read:
            continue
        near = difflib.get_close_matches(str(queue), s.queue_names, n=3, cutoff=0.6)
        meant = f" Did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
        found.append(
            checks.Warning(
                f"@job {fn.path} pushes to queue {queue!r}, which is not in "
                f"COGWORKER['QUEUES'] ({', '.join(s.queue_names)}): workers started without "
                f"'-q {queue}' never run it.{meant}",
                hint=f"Add {queue!r} to COGWORKER['QUEUES'], fix the queue name, or run a "
                f"worker with -q {queue}.",
                obj=fn.path,
                id="cogworker.W005",
            )
        )
    return found


def _load_urlconf() -> None:
    from django.conf import settings

    if getattr(settings, "ROOT_URLCONF", None):
        from django.urls import get_resolver

        get_resolver().url_patterns  # noqa: B018 - imports the URLconf and its views


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
    if s is None or s.TESTING in conf.LOCAL_MODES:
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
    if s is None or s.TESTING in conf.LOCAL_MODES:
        return []
    return redis_messages()


# Error replies and classes that mean Redis answered but refused who we are.
_AUTH_REPLIES = ("NOAUTH", "WRONGPASS", "NOPERM", "INVALIDPASSWORD")


def refused_credentials(exc: BaseException) -> bool:
    """True when Redis answered and refused the client's credentials or permissions
    (redis-py raises those as ``ConnectionError`` subclasses: not an outage)."""
    import redis

    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.AuthorizationError)):
        return True
    text = errors.safe_str(exc).lstrip().upper()
    return isinstance(exc, redis.ResponseError) and text.startswith(_AUTH_REPLIES)


def redis_failure(exc: BaseException) -> tuple[str, str]:
    """(message, hint) for a failure to talk to Redis, saying which kind it is: the
    credentials refused, a database index the server does not have, or nothing
    answering."""
    target = connection.describe_target()
    detail = errors.describe(exc).rstrip(".")
    if refused_credentials(exc):
        return (
            f"Redis at {target} refused cogworker's credentials: {detail}",
            "Check the user and password in COGWORKER['REDIS_URL'] "
            "(redis://user:password@host:6379/0) or REDIS_OPTIONS, and that the user may "
            "run the commands cogworker needs (docs/operations.md).",
        )
    if "DB index is out of range" in detail:
        return (
            f"Redis at {target} has no such database: {detail}",
            "The database index is the last part of COGWORKER['REDIS_URL'] "
            "(redis://host:6379/0); a Redis has 16 (0 to 15) unless its `databases` "
            "setting says otherwise.",
        )
    return (
        f"Redis at {target} is unreachable: {detail}",
        "Start Redis or set COGWORKER['REDIS_URL'] (or CACHE_ALIAS / SENTINELS).",
    )


def redis_messages() -> list[checks.CheckMessage]:
    """Redis reachable, new enough, not evicting keys, keeping its data on disk (this one
    talks to Redis)."""
    target = connection.describe_target()
    client, unfit = _client_or_message()
    if unfit:
        return unfit  # not contacted: it would retry, or wait too little or forever
    try:
        version = connection.server_version(client)
        policy = connection.maxmemory_policy(client)
        shape = cluster.describe(client) if cluster.is_cluster(client) else None
    except ImproperlyConfigured as exc:  # CLUSTER on, the server a plain Redis
        return [checks.Error(str(exc), id="cogworker.E005")]
    except Exception as exc:  # noqa: BLE001 - any failure here is the message
        message, hint = redis_failure(exc)
        return [checks.Error(message, hint=hint, id="cogworker.E002")]
    found: list[checks.CheckMessage] = []
    if shape is not None:
        found.append(
            checks.Info(f"Redis Cluster at {target} answers: {shape}.", id="cogworker.I001")
        )
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
    from .api.server import RedisServer

    try:
        kept = RedisServer().persistence(client)
    except Exception:  # noqa: BLE001 - unknown: say nothing rather than guess
        kept = None
    if kept is not None and kept.none:
        found.append(
            checks.Warning(
                f"Redis at {target} keeps nothing on disk (no RDB snapshots: `save` is "
                "empty; appendonly is no): a restart loses the scheduled, retrying and dead "
                "jobs, the run history, unique locks and the counters.",
                hint="Turn on appendonly yes (appendfsync everysec), or a save schedule, on "
                "the Redis that holds jobs; see docs/operations.md#persistence.",
                id="cogworker.W004",
            )
        )
    return found
