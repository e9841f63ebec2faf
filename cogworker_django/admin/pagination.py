"""Page numbers for the admin pages: ``?p=`` (1-based), links that keep the other
query parameters, and an elided list of page numbers like the changelist's."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest, QueryDict

PER_PAGE = 25


def page_number(request: HttpRequest, param: str = "p") -> int:
    try:
        return max(1, int(request.GET.get(param, "1")))
    except ValueError:
        return 1


def with_params(request: HttpRequest, **params: object) -> str:
    """``?`` + the current query string with ``params`` replaced (None removes one)."""
    query: QueryDict = request.GET.copy()
    for name, value in params.items():
        if value is None:
            query.pop(name, None)
        else:
            query[name] = str(value)
    encoded = query.urlencode()
    return f"?{encoded}" if encoded else "?"


@dataclass
class Pager:
    request: HttpRequest
    number: int
    per_page: int = PER_PAGE
    total: int | None = None  # None: unknown (history, quarantine, search)
    has_next: bool = False  # used when the total is unknown

    @classmethod
    def from_request(cls, request: HttpRequest, total: int | None = None, per_page: int = PER_PAGE):
        pager = cls(request, page_number(request), per_page, total)
        if total is not None and pager.number > pager.num_pages:
            pager.number = pager.num_pages
        return pager

    @property
    def start(self) -> int:
        return (self.number - 1) * self.per_page

    @property
    def num_pages(self) -> int:
        if self.total is None:
            return self.number + (1 if self.has_next else 0)
        return max(1, -(-self.total // self.per_page))

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def next_exists(self) -> bool:
        return self.has_next if self.total is None else self.number < self.num_pages

    @property
    def previous_url(self) -> str:
        return with_params(self.request, p=self.number - 1)

    @property
    def next_url(self) -> str:
        return with_params(self.request, p=self.number + 1)

    def links(self) -> list[tuple[int | None, str]]:
        """(number, url) for each page link; (None, "") marks an ellipsis."""
        if self.total is None:
            return []
        last = self.num_pages
        wanted = {1, 2, last - 1, last, *range(self.number - 3, self.number + 4)}
        numbers = sorted(n for n in wanted if 1 <= n <= last)
        out: list[tuple[int | None, str]] = []
        previous = 0
        for n in numbers:
            if n - previous > 1:
                out.append((None, ""))
            out.append((n, with_params(self.request, p=n)))
            previous = n
        return out
