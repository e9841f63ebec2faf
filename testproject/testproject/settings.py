"""Settings of the cogworker_django test project: the demo (`make demo`, `make runserver`).
The test suite, the scripts and the benchmark use testproject/test_settings.py, these
settings plus the tests' own app and the limiters its jobs name.

Development only: fixed SECRET_KEY, DEBUG on by default, every host allowed.

Environment knobs (the tests start workers with them):
- COGWORKER_REDIS_URL      Redis URL (default redis://127.0.0.1:6379/0)
- COGWORKER_PREFIX         key prefix (default "cogworker")
- COGWORKER_CLUSTER        "1": REDIS_URL is a node of a Redis Cluster (CLUSTER = True)
- COGWORKER_SETTINGS_JSON  JSON object merged over COGWORKER (top-level keys replaced)
- COGWORKER_PERIODIC_JSON  JSON object replacing COGWORKER_PERIODIC entirely
- COGWORKER_TASKS_BACKEND  "0" leaves the django.tasks backend out (Django 6.0+)
- COGWORKER_LOG_LEVEL      level of the cogworker_django and demo loggers (default INFO)
- TESTPROJECT_DB           SQLite file (default testproject/db.sqlite3)
- COGWORKER_TEST_POSTGRES_URL  a PostgreSQL server (postgresql://user@host:port/db): the
                           "durable_pg" database alias, for the durable-enqueue tests
                           (scripts/ensure-postgres starts one; docs/contributing.md)
- TESTPROJECT_DURABLE_SQLITE / TESTPROJECT_DURABLE_PG_NAME  the database files/names of
                           the "durable_sqlite" / "durable_pg" aliases (the tests pass
                           their test databases' to the workers they start)
- TESTPROJECT_PERIODIC_DB  the database alias of cogworker_django.PeriodicEntry (a
                           router; the periodic tests point workers at their test database)
- TESTPROJECT_EXTRA_APPS   more INSTALLED_APPS, comma-separated (e.g. "soakapp")
- DJANGO_DEBUG             "0"/"false" turns DEBUG off (default on)
- TESTPROJECT_JSON_LOGS    "1": the JSON logs recipe of docs/observability.md
- TESTPROJECT_OTEL_SPANS   a file: the OpenTelemetry SDK is installed and every span is
                           appended to it as JSON (tests/observe/test_tracing.py)
"""

import json
import os
from pathlib import Path

import django
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent  # testproject/


def _json_object_from_env(name: str) -> dict | None:
    """The JSON object in env var `name`, None when unset; anything else is an error."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, got {raw!r}")
    return value


SECRET_KEY = "django-insecure-cogworker-testproject-not-for-production"
DEBUG = os.environ.get("DJANGO_DEBUG", "1").lower() not in ("0", "false", "no", "off", "")
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "cogworker_django",
    "demo",
]
# More apps, comma-separated, from TESTPROJECT_EXTRA_APPS (the chaos soak adds soakapp).
INSTALLED_APPS += [a for a in os.environ.get("TESTPROJECT_EXTRA_APPS", "").split(",") if a]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"
WSGI_APPLICATION = "testproject.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("TESTPROJECT_DB") or BASE_DIR / "db.sqlite3",
    }
}
# The durable-enqueue tests (tests/durable/test_durable_*.py) write the outbox on these aliases,
# which a worker subprocess must reach too: a SQLite file (pytest-django's test database
# of an alias without TEST NAME would be in memory), and PostgreSQL when a server is
# given. Other tests never ask for them (pytest-django creates only the databases a test
# asks for).
DATABASES["durable_sqlite"] = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": os.environ.get("TESTPROJECT_DURABLE_SQLITE") or BASE_DIR / "durable.sqlite3",
    "TEST": {"NAME": str(BASE_DIR / "test-durable.sqlite3"), "DEPENDENCIES": []},
}
if os.environ.get("COGWORKER_TEST_POSTGRES_URL"):
    from urllib.parse import unquote, urlsplit

    _pg = urlsplit(os.environ["COGWORKER_TEST_POSTGRES_URL"])
    DATABASES["durable_pg"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("TESTPROJECT_DURABLE_PG_NAME") or _pg.path.lstrip("/") or "postgres",
        "USER": unquote(_pg.username or "postgres"),
        "PASSWORD": unquote(_pg.password or ""),
        "HOST": _pg.hostname or "127.0.0.1",
        "PORT": str(_pg.port or 5432),
        "TEST": {"NAME": "test_cogworker_durable", "DEPENDENCIES": []},
    }
# The periodic entries' database (tests/periodic/test_periodic_database*.py): the alias
# the routers give cogworker_django.PeriodicEntry in a worker the tests start.
if os.environ.get("TESTPROJECT_PERIODIC_DB"):
    DATABASE_ROUTERS = ["testproject.routers.PeriodicEntriesRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

# --- cogworker_django -------------------------------------------------------------------

COGWORKER = {
    "REDIS_URL": os.environ.get("COGWORKER_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "PREFIX": os.environ.get("COGWORKER_PREFIX", "cogworker"),
    "CLUSTER": os.environ.get("COGWORKER_CLUSTER") == "1",
}
_overrides = _json_object_from_env("COGWORKER_SETTINGS_JSON")
if _overrides is None:
    # The demo and plain manage.py commands: the weighted queues of API.md, which the
    # django.tasks backend below also serves. (The tests always pass their own settings.)
    COGWORKER["QUEUES"] = ["critical:3", "default:2", "low"]
COGWORKER.update(_overrides or {})

COGWORKER_PERIODIC = {
    "heartbeat-report": {
        "cron": "* * * * *",
        "job": "demo.jobs.heartbeat_report",
    },
    "slow-every-5-minutes": {
        "cron": "*/5 * * * *",
        "job": "demo.jobs.slow",
        "unique": "until_executed",
    },
}
_periodic = _json_object_from_env("COGWORKER_PERIODIC_JSON")
if _periodic is not None:
    COGWORKER_PERIODIC = _periodic

# django.tasks arrived in Django 6.0.
if django.VERSION >= (6, 0) and os.environ.get("COGWORKER_TASKS_BACKEND") != "0":
    _COGWORKER_TASKS = "cogworker_django.tasks_backend.CogworkerBackend"
    _TASK_QUEUES = ["default", "low", "critical"]
    TASKS = {
        "default": {"BACKEND": _COGWORKER_TASKS, "QUEUES": _TASK_QUEUES},  # RETRY: True (25)
        # The tests' other aliases: other retry options, and a backend that isn't ours.
        "noretry": {"BACKEND": _COGWORKER_TASKS, "QUEUES": _TASK_QUEUES, "OPTIONS": {"RETRY": 0}},
        "retry1": {"BACKEND": _COGWORKER_TASKS, "QUEUES": _TASK_QUEUES, "OPTIONS": {"RETRY": 1}},
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
        # Tasks as outbox rows in the caller's transaction (tests/durable/test_durable_tasks.py).
        "durable": {
            "BACKEND": _COGWORKER_TASKS,
            "QUEUES": _TASK_QUEUES,
            "OPTIONS": {"DURABLE": True},
        },
    }

if os.environ.get("TESTPROJECT_OTEL_SPANS"):
    from testapp import otel_spans

    otel_spans.install(os.environ["TESTPROJECT_OTEL_SPANS"])

_log_level = os.environ.get("COGWORKER_LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "worker": {
            "format": "%(asctime)s %(levelname)s pid=%(process)d [%(threadName)s] %(name)s: %(message)s",
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "worker"},
    },
    "loggers": {
        "cogworker_django": {"handlers": ["console"], "level": _log_level, "propagate": False},
        "demo": {"handlers": ["console"], "level": _log_level, "propagate": False},
    },
}
if os.environ.get("TESTPROJECT_JSON_LOGS") == "1":
    # The recipe of docs/observability.md, as it is there.
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"job": {"()": "cogworker_django.observe.logs.JobContextFilter"}},
        "formatters": {"json": {"()": "cogworker_django.observe.logs.JSONFormatter"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "filters": ["job"], "formatter": "json"},
        },
        "root": {"handlers": ["console"], "level": "INFO"},
        "loggers": {
            "cogworker_django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        },
    }
