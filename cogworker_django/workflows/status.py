"""A batch's progress as read at one moment (``api.Batches``, ``Batch.status()``)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from ..store import codec
from .signatures import Signature

STATES = ("open", "running", "complete", "stopped", "succeeded")


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int:
    try:
        return int(_text(value) or 0)
    except ValueError:
        return 0


def _epoch(value: Any) -> float | None:
    return codec.number(_text(value))


# An epoch as an aware UTC datetime (templates show it in the current zone).
aware = codec.utc


def _callback(spec: Any) -> str:
    spec = _text(spec)
    if not spec:
        return ""
    try:
        return repr(Signature.from_spec(spec))
    except Exception:  # noqa: BLE001 - a page must show a broken spec, not fail on it
        return spec


@dataclass(frozen=True)
class Failure:
    """A member whose last run failed (and has not succeeded since)."""

    jid: str
    error_class: str
    error_message: str
    dead: bool  # its last failure sent it to dead (or it left without a run)
    at: float | None
    retry_count: int

    @property
    def failed_at(self) -> dt.datetime | None:
        return aware(self.at)

    @classmethod
    def parse(cls, jid: Any, raw: Any) -> Failure:
        try:
            data = json.loads(raw)
        except (TypeError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        return cls(
            _text(jid),
            _text(data.get("error_class")),
            _text(data.get("error_message")),
            bool(data.get("dead")),
            _epoch(data.get("at")),
            _int(data.get("retry_count")),
        )


@dataclass(frozen=True)
class BatchRecord:
    """One batch (a ``Batch``, a chain or a group) as it stands."""

    bid: str
    kind: str  # "batch", "chain" or "group"
    description: str
    created_at: float | None
    updated_at: float | None
    total: int  # members counted so far (a chain counts the steps it has reached)
    succeeded: int
    pending: int  # members that have not succeeded yet
    waiting: int  # members with no outcome yet (none of their runs has ended)
    failed_jobs: int  # members that have failed at least once
    failures: tuple[Failure, ...]  # members whose last run failed, not succeeded since
    open_blocks: int
    complete_at: float | None  # when on_complete's moment came (the callback, if any, fired)
    success_at: float | None
    complete_jid: str
    success_jid: str
    on_success: str
    on_complete: str
    steps: int  # a chain's number of steps (0 otherwise)
    step: int  # the chain step reached (1-based)
    step_jid: str
    expires_in: int | None  # seconds before Redis forgets it (None: unknown)

    @property
    def created(self) -> dt.datetime | None:
        return aware(self.created_at)

    @property
    def updated(self) -> dt.datetime | None:
        return aware(self.updated_at)

    @property
    def completed(self) -> dt.datetime | None:
        return aware(self.complete_at)

    @property
    def succeeded_at(self) -> dt.datetime | None:
        return aware(self.success_at)

    @property
    def dead(self) -> int:
        return sum(f.dead for f in self.failures)

    @property
    def finished(self) -> bool:
        return self.success_at is not None

    @property
    def expected(self) -> int:
        """Members it will have: a chain's steps, else the members counted."""
        return max(self.total, self.steps)

    @property
    def progress(self) -> float:
        """Share of the members that have succeeded, 0.0 to 1.0."""
        if self.finished:
            return 1.0
        return self.succeeded / self.expected if self.expected else 0.0

    @property
    def percent(self) -> int:
        return int(self.progress * 100)

    @property
    def state(self) -> str:
        """ "open" (a block is open: callbacks wait), "succeeded", "stopped" (a member is
        in dead: it must be retried from there), "complete" (on_complete's moment has
        come, some member is still to succeed) or "running"."""
        if self.finished:
            return "succeeded"
        if self.open_blocks > 0:
            return "open"
        if self.dead:
            return "stopped"
        if self.complete_at is not None:
            return "complete"
        return "running"

    @classmethod
    def parse(
        cls,
        bid: str,
        fields: dict[Any, Any],
        *,
        pending: int,
        waiting: int,
        failures: list[Failure],
        ttl: int | None,
    ) -> BatchRecord:
        f = {_text(k): v for k, v in fields.items()}
        return cls(
            bid=bid,
            kind=_text(f.get("kind")) or "batch",
            description=_text(f.get("description")),
            created_at=_epoch(f.get("created_at")),
            updated_at=_epoch(f.get("updated_at")),
            total=_int(f.get("total")),
            succeeded=_int(f.get("succeeded")),
            pending=pending,
            waiting=waiting,
            failed_jobs=_int(f.get("failed_jobs")),
            failures=tuple(sorted(failures, key=lambda x: x.at or 0)),
            open_blocks=max(_int(f.get("blocks")), 0),
            complete_at=_epoch(f.get("complete_at")),
            success_at=_epoch(f.get("success_at")),
            complete_jid=_text(f.get("complete_jid")),
            success_jid=_text(f.get("success_jid")),
            on_success=_callback(f.get("on_success")),
            on_complete=_callback(f.get("on_complete")),
            steps=_int(f.get("steps")),
            step=_int(f.get("step")) or (1 if _int(f.get("steps")) else 0),
            step_jid=_text(f.get("step_jid")),
            expires_in=ttl if ttl is not None and ttl >= 0 else None,
        )
