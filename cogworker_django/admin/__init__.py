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
    _in_page_order(site)


_ORDER = {model._meta.object_name: i for i, (model, _) in enumerate(PAGES)}


def _in_page_order(site: admin.AdminSite) -> None:
    """The section lists its pages in PAGES's order, the Dashboard first (the site sorts
    every app's models by name, which put Batches and Busy before it). Only this app's
    list is reordered; the site's own ``get_app_list`` (a project's override too) still
    builds it."""
    if getattr(site, "_cogworker_ordered", False):
        return
    built = site.get_app_list

    def get_app_list(request, app_label=None):
        apps = built(request, app_label)
        for app in apps:
            if app.get("app_label") == models.Dashboard._meta.app_label:
                app["models"].sort(key=lambda m: _ORDER.get(m.get("object_name"), len(_ORDER)))
        return apps

    site.get_app_list = get_app_list  # type: ignore[method-assign]
    site._cogworker_ordered = True  # type: ignore[attr-defined]


register(admin.site)
