"""``JobRecord``: one job as the operator sees it, wrapping the raw payload exactly as it
sits in Redis (the member to remove or move) and its decoded fields.

A payload that does not decode is shown, never dropped: ``payload.decode`` returns a
wrapper (``func`` = ``"(unparseable)"``) holding the raw text, and every accessor here
tolerates missing or ill-typed fields.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from .. import payload
from ._util import as_datetime, text

# Lists show arguments cut to this many characters; the detail page shows them whole.
SHORT_ARGS = 200


def entry_key(score: float, raw: bytes) -> str:
    """A stable handle for a sorted-set entry: its score and a digest of its bytes.

    Not the jid: a member that is not JSON decodes to a wrapper with a new jid on every
    read, and two entries may share a jid. Looking an entry up by score is O(log n)."""
    return f"{score!r}|{hashlib.sha1(raw).hexdigest()[:20]}"


def parse_entry_key(key: str) -> tuple[float, str] | None:
    score, sep, digest = (key or "").partition("|")
    if not sep or not digest:
        return None
    try:
        return float(score), digest
    except ValueError:
        return None


@dataclass(frozen=True)
class JobRecord:
    raw: bytes
    job: dict[str, Any] = field(repr=False)
    score: float | None = None
    source: str = ""  # "queue", "schedule", "retry", "dead" or "busy"

    @classmethod
    def from_raw(
        cls,
        raw: bytes | str,
        score: float | None = None,
        source: str = "",
        queue: str | None = None,
    ) -> JobRecord:
        data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")
        return cls(data, payload.decode(data, queue), score, source)

    # Identity ---------------------------------------------------------------------------

    @property
    def key(self) -> str:
        """Handle for actions on a sorted-set entry (see :func:`entry_key`)."""
        return entry_key(self.score if self.score is not None else 0.0, self.raw)

    @property
    def jid(self) -> str:
        return text(self.job.get("jid"))

    @property
    def func(self) -> str:
        return text(self.job.get("func"))

    @property
    def display_name(self) -> str:
        """The job's name: its dotted path, or the django.tasks task path for a payload
        with a "kind"."""
        for name in ("func", "task_path", "task"):
            value = self.job.get(name)
            if isinstance(value, str) and value:
                return value
        return "(unknown)"

    @property
    def unparseable(self) -> bool:
        return self.job.get("func") == payload.UNPARSEABLE

    @property
    def queue(self) -> str:
        value = self.job.get("queue")
        return value if isinstance(value, str) else ""

    # Arguments --------------------------------------------------------------------------

    @property
    def args(self) -> list[Any]:
        value = self.job.get("args")
        return value if isinstance(value, list) else []

    @property
    def kwargs(self) -> dict[str, Any]:
        value = self.job.get("kwargs")
        return value if isinstance(value, dict) else {}

    @property
    def call_text(self) -> str:
        """Arguments as ``a, b, key=value`` in JSON notation (escaped by the template)."""
        parts = [_json(a) for a in self.args]
        parts += [f"{k}={_json(v)}" for k, v in self.kwargs.items()]
        return ", ".join(parts)

    @property
    def short_call_text(self) -> str:
        full = self.call_text
        return full if len(full) <= SHORT_ARGS else full[: SHORT_ARGS - 1] + "…"

    # Errors and counters ----------------------------------------------------------------

    @property
    def error_class(self) -> str:
        return text(self.job.get("error_class"))

    @property
    def error_message(self) -> str:
        return text(self.job.get("error_message"))

    @property
    def error(self) -> str:
        if not self.error_class and not self.error_message:
            return ""
        return (
            f"{self.error_class}: {self.error_message}" if self.error_class else self.error_message
        )

    @property
    def traceback(self) -> str:
        return text(self.job.get("traceback"))

    @property
    def raw_payload(self) -> str:
        """The undecodable bytes an "(unparseable)" wrapper keeps."""
        return text(self.job.get("raw_payload"))

    @property
    def raw_text(self) -> str:
        return text(self.raw)

    @property
    def retry_count(self) -> int:
        try:
            return int(self.job.get("retry_count") or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def max_retries(self) -> int:
        return payload.max_retries(self.job.get("retry"))

    # Times ------------------------------------------------------------------------------

    @property
    def at(self) -> dt.datetime | None:
        """The score as a time: run at (scheduled), retry at (retries), failed at (dead)."""
        return as_datetime(self.score)

    @property
    def created_at(self) -> dt.datetime | None:
        return as_datetime(self.job.get("created_at"))

    @property
    def enqueued_at(self) -> dt.datetime | None:
        return as_datetime(self.job.get("enqueued_at"))

    @property
    def failed_at(self) -> dt.datetime | None:
        return as_datetime(self.job.get("failed_at"))

    @property
    def first_failed_at(self) -> dt.datetime | None:
        return as_datetime(self.job.get("first_failed_at"))

    def fields(self) -> list[tuple[str, str]]:
        """Every payload field as (name, JSON text), for the detail page."""
        return [(str(k), _json(v, indent=2)) for k, v in self.job.items()]


def _json(value: Any, indent: int | None = None) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=indent is not None)
    except (TypeError, ValueError):
        return repr(value)
