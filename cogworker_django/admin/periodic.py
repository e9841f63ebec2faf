"""Periodic schedule: cron, zone, next and last run, enabled, lock holder; disable,
enable, run now."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from ..api import PeriodicEntries
from .base import Action, PageAdmin


class PeriodicAdmin(PageAdmin):
    actions_map = {
        "disable": Action("change", "do_disable"),
        "enable": Action("change", "do_enable"),
        "run_now": Action("change", "do_run_now"),
    }

    def page(self, request: HttpRequest) -> HttpResponse:
        return self.render(request, "periodic.html", entries=PeriodicEntries().list())

    def _name(self, request: HttpRequest) -> str:
        return request.POST.get("name", "")

    def _unknown(self, name: str):
        return messages.ERROR, f"There is no periodic entry named {name!r} in COGWORKER_PERIODIC."

    def do_disable(self, request: HttpRequest):
        name = self._name(request)
        try:
            PeriodicEntries().disable(name)
        except KeyError:
            return self._unknown(name)
        return f"Periodic entry {name!r} disabled: its slots are skipped until enabled."

    def do_enable(self, request: HttpRequest):
        name = self._name(request)
        try:
            PeriodicEntries().enable(name)
        except KeyError:
            return self._unknown(name)
        return f"Periodic entry {name!r} enabled."

    def do_run_now(self, request: HttpRequest):
        name = self._name(request)
        try:
            jid = PeriodicEntries().run_now(name)
        except KeyError:
            return self._unknown(name)
        if jid is None:
            return (
                messages.WARNING,
                f"{name!r} was not enqueued: a run still holds its lock (or a client "
                "middleware refused the push).",
            )
        return f"{name!r} enqueued now as job {jid}."
