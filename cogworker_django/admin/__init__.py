"""The "Cogworker" section of the Django admin.

Imported by ``admin.autodiscover()``: registers every page on ``admin.site``. A project
with its own ``AdminSite`` calls :func:`register` with it.
"""

from __future__ import annotations

from django.contrib import admin

from .. import models
from .batches import BatchAdmin
from .dashboard import DashboardAdmin
from .history import HistoryAdmin
from .jobsets import DeadAdmin, RetryAdmin, ScheduledAdmin
from .limits import LimitsAdmin
from .periodic import PeriodicAdmin
from .processes import BusyAdmin, ProcessAdmin
from .quarantine import QuarantineAdmin
from .queues import QueueAdmin

PAGES = (
    (models.Dashboard, DashboardAdmin),
    (models.Queue, QueueAdmin),
    (models.Process, ProcessAdmin),
    (models.BusyJob, BusyAdmin),
    (models.ScheduledJob, ScheduledAdmin),
    (models.RetryJob, RetryAdmin),
    (models.DeadJob, DeadAdmin),
    (models.PeriodicEntry, PeriodicAdmin),
    (models.Limiter, LimitsAdmin),
    (models.Batch, BatchAdmin),
    (models.JobRun, HistoryAdmin),
    (models.QuarantinedKey, QuarantineAdmin),
)


def register(site: admin.AdminSite) -> None:
    for model, model_admin in PAGES:
        if not site.is_registered(model):
            site.register(model, model_admin)


register(admin.site)
