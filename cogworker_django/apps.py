from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured

from .core.commandline import running_management_command


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

        # The process's runtime (store/runtime.py): its client, scripts, deferred writes.
        from .store import runtime

        runtime.install(runtime.Runtime())

        _listen_for_departing_tasks()
        _listen_for_departing_batch_members()
        _locate_jobs_for_refs()

        # Fail at startup, naming the bad key, rather than at the first enqueue.
        try:
            conf.get()
        except ImproperlyConfigured:
            # A management command reports it through the checks (cogworker.E001) or, for
            # `manage.py cogworker`, on one line; raised from here it would come with a
            # traceback. A web or other process fails here, naming the key.
            if not running_management_command():
                raise


def _listen_for_departing_tasks() -> None:
    """With django.tasks (Django 6.0+), a task that leaves without a settling run gets a
    FAILED result, in every process that can make one leave (workers, the admin)."""
    try:
        import django.tasks  # noqa: F401
    except ImportError:
        return
    from .core import departures
    from .djtasks import lifecycle

    departures.add_listener(lifecycle.departed)


def _locate_jobs_for_refs() -> None:
    """``JobRef.status()`` of a job that has not ended yet: where the read layer finds it
    (the queues, the schedule, retries, the running jobs)."""
    from .api import find
    from .core import results

    results.install_locator(find.status_of)


def _listen_for_departing_batch_members() -> None:
    """A batch member that leaves without a run (dead as a poison job, deleted or killed
    by an operator) counts as failed in its batch, in every process that can make one
    leave."""
    from .core import departures
    from .workflows import middleware

    departures.add_listener(middleware.departed)
