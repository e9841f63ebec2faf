"""Processes (quiet, stop; and the jobs of dead processes awaiting recovery) and Busy
(what runs now)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from .. import conf
from ..api import AwaitingRecovery, ProcessSet, Workers, cancel
from .base import Action, PageAdmin


class ProcessAdmin(PageAdmin):
    actions_map = {
        "quiet": Action("change", "do_quiet"),
        "stop": Action("change", "do_stop"),
    }

    def page(self, request: HttpRequest) -> HttpResponse:
        settings = conf.get()
        return self.render(
            request,
            "processes.html",
            processes=ProcessSet().list(),
            orphans=AwaitingRecovery().list(),
            orphan_threshold=settings.ORPHAN_THRESHOLD,
            orphan_check_interval=settings.ORPHAN_CHECK_INTERVAL,
        )

    def _signal(self, request: HttpRequest, what: str, done: str):
        identity = request.POST.get("identity", "")
        receivers = getattr(ProcessSet(), what)(identity)
        if not receivers:
            return messages.WARNING, f"Process {identity} did not receive {what}: it is gone."
        return f"Process {identity} asked to {what}; {done}"

    def do_quiet(self, request: HttpRequest):
        return self._signal(request, "quiet", "it takes no new jobs and finishes the ones it runs.")

    def do_stop(self, request: HttpRequest):
        return self._signal(
            request, "stop", "it shuts down gracefully (unfinished jobs go back to their queues)."
        )


class BusyAdmin(PageAdmin):
    actions_map = {"cancel": Action("change", "do_cancel")}

    def page(self, request: HttpRequest) -> HttpResponse:
        return self.render(request, "busy.html", busy=Workers().list())

    def do_cancel(self, request: HttpRequest):
        """Cancel a running job (job controls): flagged, its process told at once."""
        jid = request.POST.get("jid", "")
        try:
            where = cancel(jid)
        except ValueError as exc:
            return messages.ERROR, str(exc)
        if where is None:
            return messages.WARNING, f"Job {jid} is no longer running: it finished meanwhile."
        if where != "running":
            return f"Job {jid} was no longer running but waiting ({where}): it was removed."
        s = conf.get()
        return (
            f"Job {jid} cancelled: cancelled() is True inside it now. If it is still running "
            f"in {s.CANCEL_GRACE:g} s, the worker raises JobCancelled in it: Python code "
            "stops at once, but a job inside a C call (a sleep, a socket read, a database "
            "query) only when that call returns; still stuck "
            f"{s.TIMEOUT_GRACE:g} s later, its thread is abandoned and the job dropped as "
            "cancelled (the call itself goes on until it returns)."
        )
