"""Quarantined keys: original key, type, size, moved at, a preview; delete."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import path

from ..api import Quarantine
from .base import Action, PageAdmin
from .pagination import PER_PAGE, Pager


class QuarantineAdmin(PageAdmin):
    actions_map = {"delete": Action("delete", "do_delete")}

    def extra_urls(self, wrap):
        return [path("preview/", wrap(self.preview_view), name=self.url_name("preview"))]

    def page(self, request: HttpRequest) -> HttpResponse:
        pager = Pager.from_request(request, None)
        rows = Quarantine().list(start=pager.start, count=PER_PAGE + 1)
        pager.has_next = len(rows) > PER_PAGE
        return self.render(request, "quarantine.html", keys=rows[:PER_PAGE], pager=pager)

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        self.require(request, "view")
        key = request.GET.get("key", "")

        def render() -> HttpResponse:
            try:
                preview = Quarantine().preview(key)
            except ValueError as exc:  # not a quarantined copy: never preview other keys
                raise Http404(str(exc)) from None
            return self.render(
                request,
                "quarantine_preview.html",
                title=f"Quarantined key {key}",
                key=key,
                preview=preview,
            )

        return self.guarded(request, render)

    def do_delete(self, request: HttpRequest):
        key = request.POST.get("key", "")
        try:
            existed = Quarantine().delete(key)
        except ValueError as exc:  # not a quarantined copy: other keys are never deleted here
            return messages.ERROR, str(exc)
        if existed is False:
            return messages.WARNING, f"Quarantined key {key!r} had already gone."
        return f"Quarantined key {key!r} deleted."
