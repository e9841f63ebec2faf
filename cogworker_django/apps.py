import os
import sys

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


def _running_management_command() -> bool:
    """manage.py / django-admin: the system checks report a bad setting as cogworker.E001
    (and ``manage.py cogworker`` exits with it on one line), so raising here would only
    put a traceback in front of it."""
    program = os.path.basename(sys.argv[0]) if sys.argv else ""
    if program in ("manage.py", "django-admin", "django-admin.py"):
        return True
    return program == "__main__.py" and os.path.basename(os.path.dirname(sys.argv[0])) == "django"


def management_command() -> str | None:
    """The name of the management command this process runs (``migrate``), or None when
    it runs none (a web server, a test runner calling the checks itself)."""
    if not _running_management_command() or len(sys.argv) < 2:
        return None
    return sys.argv[1]


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
        _listen_for_departing_batch_members()

        # Fail at startup, naming the bad key, rather than at the first enqueue.
        try:
            conf.get()
        except ImproperlyConfigured:
            # A management command reports it through the checks (cogworker.E001) or, for
            # `manage.py cogworker`, on one line; raised from here it would come with a
            # traceback. A web or other process fails here, naming the key.
            if not _running_management_command():
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


def _listen_for_departing_batch_members() -> None:
    """A batch member that leaves without a run (dead as a poison job, deleted or killed
    by an operator) counts as failed in its batch, in every process that can make one
    leave."""
    from . import departures
    from .workflows import middleware

    departures.add_listener(middleware.departed)
