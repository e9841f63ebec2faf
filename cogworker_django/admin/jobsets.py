"""Scheduled, Retries and Dead: paginated or searched lists, one job's detail, and the
actions (retry now / enqueue now, delete, kill for retries, retry all and delete all
for dead, confirmed)."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import path

from ..api import DeadSet, JobSet, Outcome, RetrySet, ScheduledSet
from ..api.controls import cancel_entry
from ..api.records import SHOWN_CHARS
from .base import Action, PageAdmin, plural
from .pagination import PER_PAGE, Pager, with_params


class JobSetAdmin(PageAdmin):
    job_set: type[JobSet]
    score_label: str = "When"
    retry_label: str = "Retry now"
    actions_map = {
        "retry": Action("change", "do_retry"),
        "delete": Action("delete", "do_delete"),
    }
    bulk_actions: tuple[str, ...] = ()
    # The Error and Failures columns: a job here got here by failing (retries, dead).
    shows_failure: bool = True

    def extra_urls(self, wrap):
        return [
            path("job/", wrap(self.detail_view), name=self.url_name("job")),
            path("job/raw/", wrap(self.raw_view), name=self.url_name("job_raw")),
        ]

    def page(self, request: HttpRequest) -> HttpResponse:
        jobs = self.job_set()
        term = request.GET.get("q", "").strip()
        size = jobs.size()
        if term:
            try:
                cursor = max(0, int(request.GET.get("cursor", "0")))
            except ValueError:
                cursor = 0
            found = jobs.search(term, cursor=cursor, count=PER_PAGE)
            records = found.records
            pager = None
            more_url = None if found.complete else with_params(request, cursor=found.cursor)
        else:
            pager = Pager.from_request(request, size)
            records = jobs.page(pager.start, pager.per_page)
            more_url = None
        return self.render(
            request,
            "jobset.html",
            records=records,
            size=size,
            pager=pager,
            term=term,
            more_url=more_url,
            score_label=self.score_label,
            retry_label=self.retry_label,
            row_actions=self.row_actions(request),
            bulk_actions=self.bulk_actions,
            shows_failure=self.shows_failure,
        )

    def row_actions(self, request: HttpRequest) -> list[tuple[str, str]]:
        """(action, label) choices of the action bar the user may run."""
        out = []
        if self.has_perm(request, "change"):
            out.append(("retry", self.retry_label))
            if "kill" in self.actions_map:
                out.append(("kill", "Kill (move to dead)"))
            if "cancel" in self.actions_map:
                out.append(("cancel", "Cancel (remove, never run)"))
        if self.has_perm(request, "delete"):
            out.append(("delete", "Delete"))
        return out

    def _record(self, request: HttpRequest):
        record = self.job_set().get(request.GET.get("key", ""))
        if record is None:
            raise Http404("This job is no longer here (retried, deleted or moved).")
        return record

    def detail_view(self, request: HttpRequest) -> HttpResponse:
        self.require(request, "view")

        def render() -> HttpResponse:
            record = self._record(request)
            actions = self.row_actions(request)
            if not record.can_requeue:  # undecodable, or no queue: it can't go to one
                actions = [(value, label) for value, label in actions if value != "retry"]
            return self.render(
                request,
                "job_detail.html",
                title=f"{self.title}: {record.display_name}",
                record=record,
                score_label=self.score_label,
                retry_label=self.retry_label,
                row_actions=actions,
                raw_url=self.reverse("job_raw") + "?" + urlencode({"key": record.key}),
                shown_chars=f"{SHOWN_CHARS:,}",
            )

        return self.guarded(request, render)

    def raw_view(self, request: HttpRequest) -> HttpResponse:
        """The payload exactly as stored, as a download (never rendered as a page)."""
        self.require(request, "view")

        def download() -> HttpResponse:
            record = self._record(request)
            response = HttpResponse(record.raw, content_type="application/json; charset=utf-8")
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", record.jid)[:64] or "job"
            response["Content-Disposition"] = (
                f'attachment; filename="{self.job_set.name}-{name}.json"'
            )
            response["X-Content-Type-Options"] = "nosniff"
            return response

        return self.guarded(request, download)

    # Actions ----------------------------------------------------------------------------

    def _selected(self, request: HttpRequest):
        jobs = self.job_set()
        keys = request.POST.getlist("key")
        found = [r for r in (jobs.get(k) for k in keys) if r is not None]
        return jobs, found, len(keys) - len(found)

    def _apply(self, request: HttpRequest, method: str, verb: str):
        jobs, records, gone = self._selected(request)
        if not records and not gone:
            return messages.WARNING, "No job selected."
        done = invalid = 0
        for record in records:
            if method == "cancel":
                outcome = cancel_entry(jobs, record)
            else:
                outcome = getattr(jobs, method)(record)
            if outcome == Outcome.DONE:
                done += 1
            elif outcome == Outcome.INVALID:
                invalid += 1
            else:
                gone += 1
        parts = [f"{plural(done, 'job')} {_agree(verb, done)}."]
        if gone:
            parts.append(f"{plural(gone, 'job')} had already gone.")
        if invalid:
            parts.append(
                f"{plural(invalid, 'job')} can't go to a queue (undecodable payload or no "
                "queue) and stayed."
            )
        level = messages.SUCCESS if done and not invalid else messages.WARNING
        return level, " ".join(parts)

    def do_retry(self, request: HttpRequest):
        return self._apply(request, "retry", "sent to its queue")

    def do_delete(self, request: HttpRequest):
        return self._apply(request, "delete", "deleted")


def _agree(verb: str, n: int) -> str:
    """ "sent to its queue" for one job, "sent to their queues" for several."""
    return verb if n == 1 else verb.replace("its queue", "their queues")


class CancelMixin:
    """Cancel (job controls): the selected jobs removed, never run (api.cancel_entry)."""

    def do_cancel(self, request: HttpRequest):
        return self._apply(request, "cancel", "cancelled")  # type: ignore[attr-defined]


class ScheduledAdmin(CancelMixin, JobSetAdmin):
    job_set = ScheduledSet
    score_label = "Run at"
    retry_label = "Enqueue now"
    shows_failure = False  # enqueued for later, not failed: no error, no failure count
    actions_map = {**JobSetAdmin.actions_map, "cancel": Action("change", "do_cancel")}


class RetryAdmin(CancelMixin, JobSetAdmin):
    job_set = RetrySet
    score_label = "Next retry"
    actions_map = {
        **JobSetAdmin.actions_map,
        "kill": Action("change", "do_kill"),
        "cancel": Action("change", "do_cancel"),
    }

    def do_kill(self, request: HttpRequest):
        return self._apply(request, "kill", "moved to dead")


class DeadAdmin(JobSetAdmin):
    job_set = DeadSet
    score_label = "Failed at"
    actions_map = {
        **JobSetAdmin.actions_map,
        "retry_all": Action("change", "do_retry_all", confirm="retry all"),
        "delete_all": Action("delete", "do_delete_all", confirm="delete all"),
    }
    bulk_actions = ("retry_all", "delete_all")

    def confirm_text(self, request, action) -> str:
        n = plural(DeadSet().size(), "dead job")
        if action.handler == "do_retry_all":
            return f"Send all {n} back to their queues?"
        return f"Delete all {n}? This can't be undone."

    def do_retry_all(self, request: HttpRequest):
        result = DeadSet().retry_all()
        text = f"{plural(result.done, 'dead job')} {_agree('sent to its queue', result.done)}."
        if result.invalid:
            text += f" {plural(result.invalid, 'job')} can't go to a queue and stayed."
            return messages.WARNING, text
        return text

    def do_delete_all(self, request: HttpRequest):
        return f"{plural(DeadSet().delete_all().done, 'dead job')} deleted."
