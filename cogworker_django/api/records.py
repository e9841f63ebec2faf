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
from functools import cached_property
from typing import Any

from ..core import payload, tracebacks
from ..store import codec
from ._util import as_datetime, text

# Lists show arguments cut to this many characters.
SHORT_ARGS = 200
# A detail page shows this much of a job's arguments and of its payload; the rest is in
# the raw JSON download (a 10 MB argument must not make a 20 MB page).
SHOWN_CHARS = 20_000


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
    # The home (store/homes.py) of the set it was read from; "" for a record not read
    # from a set.
    home: str = ""

    @classmethod
    def from_raw(
        cls,
        raw: bytes | str,
        score: float | None = None,
        source: str = "",
        queue: str | None = None,
    ) -> JobRecord:
        data = codec.wire(raw)
        return cls(data, payload.decode(data, queue), score, source)

    def __repr__(self) -> str:
        # What a shell user wants to see (the payload itself is long: .job has it).
        score = f", score={self.score!r}" if self.score is not None else ""
        source = f", source={self.source!r}" if self.source else ""
        return (
            f"JobRecord(jid={self.job.get('jid')!r}, func={self.job.get('func')!r}, "
            f"queue={self.job.get('queue')!r}{source}{score})"
        )

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
        """Arguments as ``a, b, key=value`` in JSON notation (escaped by the template).
        Whole: pages show :meth:`call_text_upto` of it."""
        parts = [_json(a) for a in self.args]
        parts += [f"{k}={_json(v)}" for k, v in self.kwargs.items()]
        return ", ".join(parts)

    def call_text_upto(self, limit: int) -> tuple[str, bool]:
        """The first ``limit`` characters of :attr:`call_text` (an ellipsis ending a cut
        one), and whether it was cut; stops encoding once past the limit."""
        pieces: list[str] = []
        length = 0
        items = [(None, a) for a in self.args] + list(self.kwargs.items())
        for i, (name, value) in enumerate(items):
            piece = ("" if i == 0 else ", ") + ("" if name is None else f"{name}=") + _json(value)
            pieces.append(piece)
            length += len(piece)
            if length > limit:
                return "".join(pieces)[: limit - 1] + "…", True
        return "".join(pieces), False

    @property
    def short_call_text(self) -> str:
        return self.call_text_upto(SHORT_ARGS)[0]

    @cached_property
    def shown_call(self) -> tuple[str, bool]:
        """What a detail page shows of the arguments: (text, cut)."""
        return self.call_text_upto(SHOWN_CHARS)

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
    def shown_traceback(self) -> str:
        """The traceback with the worker's frames above the job's own left out (as a
        worker stores it now; older entries are collapsed here)."""
        return tracebacks.collapse_traceback(self.traceback)

    @property
    def raw_payload(self) -> str:
        """The undecodable bytes an "(unparseable)" wrapper keeps."""
        return text(self.job.get("raw_payload"))

    @property
    def raw_text(self) -> str:
        return text(self.raw)

    @property
    def raw_size(self) -> int:
        """Size of the payload as stored, in bytes."""
        return len(self.raw)

    @property
    def shown_raw_payload(self) -> tuple[str, bool]:
        """What a detail page shows of an undecodable payload's bytes: (text, cut)."""
        raw = self.raw_payload
        return (raw, False) if len(raw) <= SHOWN_CHARS else (raw[: SHOWN_CHARS - 1] + "…", True)

    @property
    def shown_payload(self) -> tuple[str, bool]:
        """The payload's fields as indented JSON for a detail page, the traceback left out
        (the page shows it on its own) and cut to SHOWN_CHARS: (text, cut)."""
        fields = {k: v for k, v in self.job.items() if k not in ("traceback", "raw_payload")}
        if "traceback" in self.job:
            fields["traceback"] = "(shown above)"
        # Arguments too long to show whole are shown (cut) above, not again here.
        cut = self.shown_call[1]
        if cut:
            note = "(too long to show here: the arguments above are cut, the download has them)"
            fields["args"], fields["kwargs"] = note, note
        body = _json(fields, indent=2)
        if len(body) > SHOWN_CHARS:
            return body[: SHOWN_CHARS - 1] + "…", True
        return body, cut

    @property
    def can_requeue(self) -> bool:
        """Whether "retry now" / "enqueue now" can send it to a queue (decodable, a
        queue named)."""
        return not self.unparseable and bool(self.queue)

    @property
    def retry_count(self) -> int:
        try:
            return int(self.job.get("retry_count") or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def max_retries(self) -> int:
        return payload.max_retries(self.job.get("retry"))

    @property
    def failures_text(self) -> str:
        """``retry_count`` counts failed runs: ``failed 3 times; retry=2 allows 2 retries
        after the first run``."""
        n = self.retry_count
        error_class = self.job.get("error_class")
        if n == 0 and error_class:
            # Filed in dead without a failed run (not registered, orphaned too often,
            # unparseable, ...): retries never applied.
            return (
                f"Never retried: {error_class} sends a job to dead at once (retries are for "
                "runs that fail)"
            )
        times = "never failed" if n == 0 else "failed once" if n == 1 else f"failed {n} times"
        allowed = self.max_retries
        allows = (
            "no retry (straight to dead)"
            if allowed == 0
            else f"{allowed} retr{'y' if allowed == 1 else 'ies'} after the first run"
        )
        return f"{times.capitalize()}; retry={self.job.get('retry')!r} allows {allows}"

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
