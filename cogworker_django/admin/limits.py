"""Limits: each limiter of ``COGWORKER["LIMITS"]``, its use now, and who holds its
concurrency leases (job controls)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from .. import conf
from ..api import Limits
from .base import PageAdmin


class LimitsAdmin(PageAdmin):
    def page(self, request: HttpRequest) -> HttpResponse:
        settings = conf.get()
        return self.render(
            request,
            "limits.html",
            limits=Limits().all(),
            orphan_threshold=settings.ORPHAN_THRESHOLD,
        )
