"""Periodic schedule: every entry (settings and database) with its cron, zone, next and
last run, enabled, lock holder; disable, enable, run now; and Django's own add / change
/ delete / history views for the database entries (so the admin log keeps who changed
what, and the permissions are the model's: add, change, delete, view).

Settings entries are read-only here except disable / enable / run now. The form checks
an entry as ``COGWORKER_PERIODIC`` is checked (``PeriodicEntry.clean``) and shows the
next fire times of the cron line as it is typed (``preview/``, a JSON view).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils.html import format_html, format_html_join

from ..api import PeriodicEntries
from ..periodic import stored
from .base import Action, PageAdmin

# Fire times shown under the cron line (form and preview).
SHOWN_FIRE_TIMES = 5


class PeriodicAdmin(PageAdmin):
    actions_map = {
        "disable": Action("change", "do_disable"),
        "enable": Action("change", "do_enable"),
        "run_now": Action("change", "do_run_now"),
    }
    fieldsets = (
        (None, {"fields": ("name", "description", "enabled")}),
        (
            "Schedule",
            {"fields": ("cron", "timezone", "next_fire_times")},
        ),
        ("Job", {"fields": ("job", "args", "kwargs", "queue", "unique")}),
        ("History", {"fields": ("changed_at",), "classes": ("collapse",)}),
    )
    readonly_fields = ("next_fire_times", "changed_at")

    class Media:
        js = ("cogworker_django/periodic_form.js",)

    # Permissions: the model's own (PageAdmin checks each kind against them) ----------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_perm(request, "add")

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        return {**super().get_model_perms(request), "add": self.has_perm(request, "add")}

    # URLs: the page and its actions (PageAdmin), Django's views for the rows ---------------

    def extra_urls(self, wrap: Callable) -> list:
        return [
            path("preview/", wrap(self.preview_view), name=self.url_name("preview")),
            path("add/", wrap(self.add_view), name=self.url_name("add")),
            path("<path:object_id>/change/", wrap(self.change_view), name=self.url_name("change")),
            path("<path:object_id>/delete/", wrap(self.delete_view), name=self.url_name("delete")),
            path(
                "<path:object_id>/history/", wrap(self.history_view), name=self.url_name("history")
            ),
        ]

    # The page --------------------------------------------------------------------------

    def page(self, request: HttpRequest) -> HttpResponse:
        return self.render(
            request,
            "periodic.html",
            entries=PeriodicEntries().list(),
            can_add=self.has_perm(request, "add"),
            add_url=self.reverse("add"),
        )

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        """The next fire times of ``cron`` in ``timezone`` (GET), for the form."""
        self.require(request, "view")
        cron, zone = request.GET.get("cron", ""), request.GET.get("timezone", "")
        try:
            times = stored.next_fire_times(cron, zone or None, SHOWN_FIRE_TIMES)
        except Exception as exc:  # noqa: BLE001 - the reason is the answer
            return JsonResponse({"times": [], "error": str(exc) or type(exc).__name__})
        return JsonResponse({"times": [t.strftime("%a %Y-%m-%d %H:%M:%S %Z") for t in times]})

    @staticmethod
    def next_fire_times(obj: Any) -> str:
        """(readonly field) The saved cron line's next fire times; the script replaces
        them as the line is edited."""
        try:
            times = stored.next_fire_times(obj.cron, obj.timezone or None, SHOWN_FIRE_TIMES)
        except Exception as exc:  # noqa: BLE001 - shown instead
            text = str(exc) if obj.cron else "Type a cron line to see when it fires."
            return format_html('<div class="cw-fire-times" data-empty="1">{}</div>', text)
        items = format_html_join(
            "", "<li>{}</li>", ((t.strftime("%a %Y-%m-%d %H:%M:%S %Z"),) for t in times)
        )
        return format_html('<ul class="cw-fire-times">{}</ul>', items)

    next_fire_times.short_description = "Next fire times"  # type: ignore[attr-defined]

    # Actions ---------------------------------------------------------------------------

    def _name(self, request: HttpRequest) -> str:
        return request.POST.get("name", "")

    def _unknown(self, name: str):
        return messages.ERROR, f"There is no periodic entry named {name!r}."

    def _logged(self, request: HttpRequest, name: str, what: str) -> None:
        """A database entry's disable / enable goes to the admin log, as an edit does."""
        row = stored.PeriodicEntry.objects.filter(name=name).first()
        if row is not None:
            self.log_change(request, row, what)

    def do_disable(self, request: HttpRequest):
        name = self._name(request)
        try:
            PeriodicEntries().disable(name)
        except KeyError:
            return self._unknown(name)
        self._logged(request, name, "Disabled.")
        return f"Periodic entry {name!r} disabled: its slots are skipped until enabled."

    def do_enable(self, request: HttpRequest):
        name = self._name(request)
        try:
            PeriodicEntries().enable(name)
        except KeyError:
            return self._unknown(name)
        self._logged(request, name, "Enabled.")
        return f"Periodic entry {name!r} enabled."

    def do_run_now(self, request: HttpRequest):
        name = self._name(request)
        try:
            jid = PeriodicEntries().run_now(name)
        except KeyError:
            return self._unknown(name)
        except ValueError as exc:
            return messages.ERROR, str(exc)
        if jid is None:
            return (
                messages.WARNING,
                f"{name!r} was not enqueued: a run still holds its lock (or a client "
                "middleware refused the push).",
            )
        return f"{name!r} enqueued now as job {jid}."
