"""``PageAdmin``: a ModelAdmin whose pages read Redis through the api instead of a
table. Shared here: the URLs (each view wrapped in ``admin_site.admin_view``, so
anonymous users get the login page), permissions (view to look, change to act, delete
to remove; 403 otherwise), POST-only actions with CSRF, confirmation pages for
destructive bulk actions, messages, and the page shown when Redis can't answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from .. import checks
from ..store import connection, errors

TEMPLATES = "cogworker_django/admin/"


@dataclass(frozen=True)
class Action:
    """A POST action of a page: the permission it needs and what the confirmation page
    says (None: no confirmation)."""

    permission: str  # "change" or "delete"
    handler: str  # method name: f(request) -> message text, or an HttpResponse
    confirm: str | None = None


class PageAdmin(admin.ModelAdmin):
    template: str = ""
    actions_map: dict[str, Action] = {}
    # Disable the ModelAdmin machinery a table-less page doesn't have.
    actions = None

    # Permissions ------------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_perm(self, request: HttpRequest, kind: str) -> bool:
        opts = self.model._meta
        if kind not in opts.default_permissions:
            return False  # a read-only page: even a superuser can't act on it
        if kind == "view":
            return self.has_view_permission(request)
        # django-stubs types request.user as AbstractBaseUser | AnonymousUser without its
        # plugin (the user model unknown); an admin user model has has_perm.
        return request.user.has_perm(f"{opts.app_label}.{kind}_{opts.model_name}")  # type: ignore[union-attr]

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        # The admin index labels an entry "Change" when this says change: there is no
        # change form here, so every page is listed as "View" (when the user may look).
        return {
            "add": False,
            "change": False,
            "delete": False,
            "view": self.has_perm(request, "view"),
        }

    def require(self, request: HttpRequest, kind: str) -> None:
        if not self.has_perm(request, kind):
            raise PermissionDenied(f"You need the {kind} permission on {self.title}.")

    @property
    def title(self) -> str:
        return str(self.model._meta.verbose_name_plural)

    # URLs -------------------------------------------------------------------------------

    def url_name(self, suffix: str) -> str:
        opts = self.model._meta
        return f"{opts.app_label}_{opts.model_name}_{suffix}"

    def reverse(self, suffix: str = "changelist") -> str:
        return reverse(f"{self.admin_site.name}:{self.url_name(suffix)}")

    def get_urls(self):
        def wrap(view: Callable) -> Callable:
            return self.admin_site.admin_view(view)

        return [
            path("", wrap(self.page_view), name=self.url_name("changelist")),
            path("action/", wrap(self.action_view), name=self.url_name("action")),
            *self.extra_urls(wrap),
        ]

    def extra_urls(self, wrap: Callable) -> list:
        return []

    # Rendering --------------------------------------------------------------------------

    def context(self, request: HttpRequest, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": extra.pop("title", self.title),
            "page_url": self.reverse(),
            "action_url": self.reverse("action"),
            "can_change": self.has_perm(request, "change"),
            "can_delete": self.has_perm(request, "delete"),
            "redis_target": connection.describe_target(),
            **extra,
        }

    def render(self, request: HttpRequest, template: str, **extra: Any) -> TemplateResponse:
        return TemplateResponse(request, TEMPLATES + template, self.context(request, **extra))

    def guarded(self, request: HttpRequest, fn: Callable[[], HttpResponse]) -> HttpResponse:
        """``fn()``, or a 503 page when Redis can't answer (down, or a key of the wrong
        type)."""
        try:
            return fn()
        except redis.RedisError as exc:
            response = self.render(
                request,
                "redis_error.html",
                error=errors.describe(exc).rstrip("."),
                refused=checks.refused_credentials(exc),
                outage=errors.is_unavailable(exc),
            )
            response.status_code = 503
            return response

    # Views ------------------------------------------------------------------------------

    def page_view(self, request: HttpRequest) -> HttpResponse:
        self.require(request, "view")
        return self.guarded(request, lambda: self.page(request))

    def page(self, request: HttpRequest) -> HttpResponse:
        raise NotImplementedError

    def action_view(self, request: HttpRequest) -> HttpResponse:
        return require_POST(self._action)(request)

    def _action(self, request: HttpRequest) -> HttpResponse:
        self.require(request, "view")
        name = request.POST.get("action", "")
        action = self.actions_map.get(name)
        if action is None:
            return HttpResponseBadRequest(f"Unknown action {name!r}.")
        self.require(request, action.permission)
        if action.confirm and request.POST.get("confirmed") != "yes":
            return self.guarded(request, lambda: self.confirm_page(request, name, action))
        outcome = self.guarded(request, lambda: getattr(self, action.handler)(request))
        if isinstance(outcome, HttpResponse):
            return outcome
        if outcome:
            level, text = outcome if isinstance(outcome, tuple) else (messages.SUCCESS, outcome)
            messages.add_message(request, level, text, fail_silently=True)
        return HttpResponseRedirect(self.next_url(request))

    def confirm_page(self, request: HttpRequest, name: str, action: Action) -> HttpResponse:
        fields = [(k, v) for k, values in request.POST.lists() for v in values]
        fields = [(k, v) for k, v in fields if k not in ("csrfmiddlewaretoken", "confirmed")]
        return self.render(
            request,
            "confirm.html",
            title="Are you sure?",
            question=self.confirm_text(request, action),
            fields=fields,
            cancel_url=self.next_url(request),
            destructive=action.permission == "delete",
        )

    def confirm_text(self, request: HttpRequest, action: Action) -> str:
        return action.confirm or ""

    def next_url(self, request: HttpRequest) -> str:
        target = request.POST.get("next") or ""
        if target and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            return target
        return self.reverse()


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
