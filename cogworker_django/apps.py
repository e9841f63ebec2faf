import sys

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


def _running_worker_command() -> bool:
    # Django's own rule: the subcommand is argv[1].
    return len(sys.argv) > 1 and sys.argv[1] == "cogworker"


class CogworkerConfig(AppConfig):
    name = "cogworker_django"
    verbose_name = "Cogworker"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import (  # noqa: F401 - checks registers the system checks
            checks,
            conf,
            testing,  # noqa: F401 - installs the TESTING modes' sinks in client
        )

        _listen_for_departing_tasks()

        # Fail at startup, naming the bad key, rather than at the first enqueue.
        try:
            conf.get()
        except ImproperlyConfigured:
            # `manage.py cogworker` validates again and exits with this message on one
            # line; raised from here it would come with a traceback.
            if not _running_worker_command():
                raise


def _listen_for_departing_tasks() -> None:
    """With django.tasks (Django 6.0+), a task that leaves without a settling run gets a
    FAILED result, in every process that can make one leave (workers, the admin)."""
    try:
        import django.tasks  # noqa: F401
    except ImportError:
        return
    from . import departures
    from .djtasks import lifecycle

    departures.add_listener(lifecycle.departed)
