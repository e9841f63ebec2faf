"""What a job keeps of its run (core/results.py), for the operator: its status, the
kept return value or error, its progress. The admin's Busy and "Find a job" pages read
them here; a shell can too (``Results().of(jid)``).

Values are shown as they are kept (JSON text), never loaded: a model passed by
reference is not fetched from the database to show a page."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core import results
from ..store import keys
from ._util import as_datetime, client, text


@dataclass(frozen=True)
class KeptResult:
    """``status`` (results.STATUSES; a django.tasks result's too); ``value``: the kept
    return value as JSON text ("" when none); ``error``: ``{"class", "message",
    "traceback"}`` or None; ``unkept``: why a return value was not kept; ``progress``:
    the last report or None; ``ttl``: seconds left, -1 for none."""

    jid: str
    status: str | None
    value: str = ""
    error: dict[str, str] | None = None
    unkept: str = ""
    progress: dict[str, Any] | None = None
    ended_at: dt.datetime | None = None
    ttl: int = -1

    @property
    def percent(self) -> float | None:
        return percent(self.progress)


def percent(progress: dict[str, Any] | None) -> float | None:
    """How far a progress report is, 0-100 (None without a total)."""
    if not progress:
        return None
    done, total = progress.get("done"), progress.get("total")
    if not isinstance(done, (int, float)) or not isinstance(total, (int, float)) or total <= 0:
        return None
    return max(0.0, min(100.0, 100.0 * done / total))


class Results:
    def of(self, jid: str) -> KeptResult | None:
        """What ``jid`` keeps (None: nothing, or its result_ttl is over)."""
        pipe = client().pipeline(transaction=False)
        pipe.hgetall(keys.result(jid))
        pipe.ttl(keys.result(jid))
        data, ttl = pipe.execute()
        fields = {text(k): text(v) for k, v in (data or {}).items()}
        status = results.status_of(fields)
        progress = results.progress_of(fields)
        if status is None and progress is None:
            return None
        error = _json(fields.get("error"))
        if "task" in fields and fields.get("errors"):
            failures = _json(fields.get("errors"))
            last = failures[-1] if isinstance(failures, list) and failures else {}
            error = {
                "class": str(last.get("exception_class_path", "")),
                "message": "",
                "traceback": str(last.get("traceback", "")),
            }
        return KeptResult(
            jid,
            status,
            value=fields.get("value") or fields.get("return_value", ""),
            error=error if isinstance(error, dict) else None,
            unkept=fields.get("unkept", ""),
            progress=progress,
            ended_at=as_datetime(fields.get("ended_at")),
            ttl=int(ttl) if isinstance(ttl, int) else -1,
        )

    def progress_of(self, jids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The last progress of each of ``jids`` that reported one (one round trip)."""
        jids = [j for j in jids if j]
        if not jids:
            return {}
        pipe = client().pipeline(transaction=False)
        for jid in jids:
            pipe.hget(keys.result(jid), "progress")
        out = {}
        for jid, raw in zip(jids, pipe.execute(raise_on_error=False), strict=True):
            value = _json(text(raw)) if isinstance(raw, (bytes, str)) else None
            if isinstance(value, dict):
                out[jid] = value
        return out


def _json(value: str | None) -> Any:
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None
