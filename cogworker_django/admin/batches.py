"""Batches (chains and groups too): progress, state and callbacks; one batch's members,
each with where it stands and a link to where it waits (dead, retries, scheduled)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import path, reverse

from ..api import Batches
from .base import PageAdmin
from .pagination import PER_PAGE, Pager

MEMBERS_PER_PAGE = 100


class BatchAdmin(PageAdmin):
    def extra_urls(self, wrap):
        return [path("batch/", wrap(self.detail_view), name=self.url_name("batch"))]

    def page(self, request: HttpRequest) -> HttpResponse:
        batches = Batches()
        pager = Pager.from_request(request, batches.count(), PER_PAGE)
        rows = batches.list(pager.start, pager.per_page)
        return self.render(
            request, "batches.html", rows=rows, pager=pager, detail_url=self.reverse("batch")
        )

    def _set_url(self, model: str) -> str:
        return reverse(f"{self.admin_site.name}:cogworker_django_{model}_changelist")

    def detail_view(self, request: HttpRequest) -> HttpResponse:
        self.require(request, "view")
        bid = request.GET.get("bid", "")

        def render() -> HttpResponse:
            batches = Batches()
            record = batches.get(bid) if bid else None
            if record is None:
                raise Http404("No such batch (it may have expired).")
            pager = Pager.from_request(request, batches.member_count(bid), MEMBERS_PER_PAGE)
            members = batches.members(bid, pager.start, pager.per_page)
            where = {
                "dead": self._set_url("deadjob"),
                "failed": self._set_url("retryjob"),
                "waiting": self._set_url("scheduledjob"),
            }
            rows = [(m, where.get(m.state)) for m in members]
            return self.render(
                request,
                "batch_detail.html",
                title=f"{record.kind.capitalize()} {record.bid}",
                batch=record,
                rows=rows,
                pager=pager,
                dead_url=self._set_url("deadjob"),
                history_url=self._set_url("jobrun"),
            )

        return self.guarded(request, render)
