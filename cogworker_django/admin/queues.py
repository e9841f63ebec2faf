"""Queues: size, latency, paused; pause, resume, clear (confirmed); and one queue's
jobs in the order they will run, each of which can be deleted."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import path

from ..api import Outcome, Queue
from .base import Action, PageAdmin, plural
from .pagination import Pager


class QueueAdmin(PageAdmin):
    actions_map = {
        "pause": Action("change", "do_pause"),
        "resume": Action("change", "do_resume"),
        "clear": Action("delete", "do_clear", confirm="clear"),
        "delete_job": Action("delete", "do_delete_job"),
    }

    def extra_urls(self, wrap):
        return [path("jobs/", wrap(self.jobs_view), name=self.url_name("jobs"))]

    def page(self, request: HttpRequest) -> HttpResponse:
        return self.render(request, "queues.html", queues=Queue.overview(left_behind=False))

    def jobs_view(self, request: HttpRequest) -> HttpResponse:
        self.require(request, "view")
        name = request.GET.get("name", "")
        if not name:
            raise Http404("No queue named.")

        def render() -> HttpResponse:
            queue = Queue(name)
            info = queue.info()
            pager = Pager.from_request(request, info.size)
            return self.render(
                request,
                "queue_jobs.html",
                title=f"Queue {name}",
                queue=info,
                records=queue.jobs(pager.start, pager.per_page),
                pager=pager,
            )

        return self.guarded(request, render)

    def _queue(self, request: HttpRequest) -> Queue:
        return Queue(request.POST.get("name", ""))

    def confirm_text(self, request, action) -> str:
        q = self._queue(request)
        return (
            f"Clear queue {q.name!r}? Its {plural(q.size(), 'job')} will be deleted (and "
            "their unique locks released). This can't be undone."
        )

    def do_pause(self, request: HttpRequest) -> str:
        q = self._queue(request)
        q.pause()
        return f"Queue {q.name!r} paused: workers take no new jobs from it."

    def do_resume(self, request: HttpRequest) -> str:
        q = self._queue(request)
        q.resume()
        return f"Queue {q.name!r} resumed."

    def do_clear(self, request: HttpRequest) -> str:
        q = self._queue(request)
        return f"Queue {q.name!r} cleared: {plural(q.clear(), 'job')} deleted."

    def do_delete_job(self, request: HttpRequest):
        q = self._queue(request)
        jid = request.POST.get("jid", "")
        record = q.get(request.POST.get("key", ""), jid) if jid else None
        if record is None or q.delete(record) == Outcome.GONE:
            return (
                messages.WARNING,
                f"Job {jid} is no longer in queue {q.name!r} (a worker took it, or it was "
                "deleted).",
            )
        return f"Job {jid} ({record.display_name}) deleted from queue {q.name!r}."
