"""Unmanaged models: no table, one per admin page; and, at the end, the real tables: the
durable enqueue's outbox (durable/entry.py) and the periodic entries edited in the admin
(periodic/stored.py, whose admin page lists the settings' entries beside them).

The pages exist for what the admin hangs on a model: an entry in the admin index under
"Cogworker", and Django auth permissions (view to look, change to act, delete to
remove). The data itself stays in Redis and is read through ``cogworker_django.api``.
"""

from django.db import models


class _Page(models.Model):
    class Meta:
        abstract = True
        managed = False


class Dashboard(_Page):
    class Meta(_Page.Meta):
        verbose_name = "dashboard"
        verbose_name_plural = "Dashboard"
        default_permissions = ("view",)


class Queue(_Page):
    class Meta(_Page.Meta):
        verbose_name = "queue"
        verbose_name_plural = "Queues"
        default_permissions = ("view", "change", "delete")  # change: pause; delete: clear


class Process(_Page):
    class Meta(_Page.Meta):
        verbose_name = "process"
        verbose_name_plural = "Processes"
        default_permissions = ("view", "change")  # change: quiet, stop


class BusyJob(_Page):
    class Meta(_Page.Meta):
        verbose_name = "busy job"
        verbose_name_plural = "Busy"
        default_permissions = ("view", "change")  # change: cancel


class ScheduledJob(_Page):
    class Meta(_Page.Meta):
        verbose_name = "scheduled job"
        verbose_name_plural = "Scheduled"
        default_permissions = ("view", "change", "delete")  # change: enqueue now, cancel


class RetryJob(_Page):
    class Meta(_Page.Meta):
        verbose_name = "retry"
        verbose_name_plural = "Retries"
        default_permissions = ("view", "change", "delete")  # change: retry now, kill, cancel


class DeadJob(_Page):
    class Meta(_Page.Meta):
        verbose_name = "dead job"
        verbose_name_plural = "Dead"
        default_permissions = ("view", "change", "delete")  # change: retry (all)


class JobRun(_Page):
    class Meta(_Page.Meta):
        verbose_name = "job run"
        verbose_name_plural = "History"
        default_permissions = ("view",)


class QuarantinedKey(_Page):
    class Meta(_Page.Meta):
        verbose_name = "quarantined key"
        verbose_name_plural = "Quarantined keys"
        default_permissions = ("view", "delete")


class Batch(_Page):
    class Meta(_Page.Meta):
        verbose_name = "batch"
        verbose_name_plural = "Batches"
        default_permissions = ("view",)


class Limiter(_Page):
    class Meta(_Page.Meta):
        verbose_name = "limiter"
        verbose_name_plural = "Limits"
        default_permissions = ("view",)


# The durable enqueue's outbox: a real table (cogworker_django/durable/).
from .durable.entry import OutboxEntry  # noqa: E402,F401

# Periodic entries stored in the database (cogworker_django/periodic/).
from .periodic.stored import PeriodicEntry  # noqa: E402,F401
