"""History: recent runs with status, duration and error; filter by job and status."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from ..api import History
from ..api.history import STATUSES
from .base import PageAdmin
from .pagination import PER_PAGE, Pager


class HistoryAdmin(PageAdmin):
    def page(self, request: HttpRequest) -> HttpResponse:
        job = request.GET.get("job", "").strip()
        status = request.GET.get("status", "")
        status = status if status in STATUSES else ""
        history = History()
        pager = Pager.from_request(request, None)
        # One extra row tells whether there is a next page without counting them all.
        runs = history.query(
            job=job or None, status=status or None, start=pager.start, count=PER_PAGE + 1
        )
        pager.has_next = len(runs) > PER_PAGE
        return self.render(
            request,
            "history.html",
            runs=runs[:PER_PAGE],
            pager=pager,
            job=job,
            status=status,
            statuses=STATUSES,
            # The summary reads every retained run: shown on the first page only.
            summary=history.summary(job=job or None) if pager.number == 1 else None,
        )
