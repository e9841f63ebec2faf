"""The job payload: a JSON object, never pickle.

Fields: ``jid``, ``func`` (dotted path of a registered job), ``args``, ``kwargs``,
``queue``, ``retry``, ``retry_count``, ``created_at``, ``enqueued_at``; later stages add
``at``, ``error_class``, ``error_message``, ``failed_at``, ``retried_at``, ``traceback``,
``orphan_count``, ``unique``/``unique_for``/``unique_digest``, ``periodic``...

Decoding never raises: bytes that are not a JSON object become a wrapper job that keeps
the raw bytes (capped) for the dead set.
"""

from __future__ import annotations

import json
import os
import time
import traceback as tb
from typing import Any

from .errors import safe_str

DEFAULT_MAX_RETRIES = 25
UNPARSEABLE = "(unparseable)"
RAW_PAYLOAD_LIMIT = 100_000
ERROR_MESSAGE_LIMIT = 10_000
TRACEBACK_LIMIT = 20_000

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def new_jid() -> str:
    # 96 random bits from the OS (what secrets.token_hex uses, minus its overhead).
    return os.urandom(12).hex()


def build(
    func: str,
    args: tuple | list = (),
    kwargs: dict | None = None,
    *,
    queue: str = "default",
    retry: Any = True,
    jid: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    now = time.time()
    job = {
        "jid": jid or new_jid(),
        "func": func,
        "args": list(args),
        "kwargs": dict(kwargs or {}),
        "queue": queue,
        "retry": retry,
        "retry_count": 0,
        "created_at": now,
        "enqueued_at": now,
    }
    job.update(extra)
    return job


def encode(job: dict[str, Any]) -> str:
    """JSON text of ``job``; a value JSON can't hold raises TypeError naming the argument."""
    try:
        return _dumps(job)
    except (TypeError, ValueError) as exc:
        raise TypeError(_explain_unserialisable(job, exc)) from None


def _explain_unserialisable(job: dict[str, Any], exc: Exception) -> str:
    func = job.get("func", "?")
    for i, value in enumerate(job.get("args") or ()):
        if not is_json(value):
            return (
                f"{func}: positional argument {i} ({type(value).__name__}) is not JSON-serialisable;"
                " pass plain data (ids, strings, numbers, lists, dicts)"
            )
    for name, value in (job.get("kwargs") or {}).items():
        if not isinstance(name, str):
            return f"{func}: keyword argument names must be strings, got {name!r}"
        if not is_json(value):
            return (
                f"{func}: keyword argument {name!r} ({type(value).__name__}) is not "
                "JSON-serialisable; pass plain data (ids, strings, numbers, lists, dicts)"
            )
    return f"{func}: the job is not JSON-serialisable: {safe_str(exc)}"


def is_json(value: Any) -> bool:
    """True when ``value`` can travel in a payload."""
    try:
        _dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def decode(raw: bytes | str, queue: str | None = None) -> dict[str, Any]:
    """The job dict in ``raw``; a wrapper job (``func`` = UNPARSEABLE) when it isn't one."""
    try:
        job = json.loads(raw)
    except (ValueError, TypeError) as exc:
        return unparseable(raw, queue, "JSONDecodeError", safe_str(exc))
    if not isinstance(job, dict):
        return unparseable(
            raw, queue, "InvalidPayload", f"expected a JSON object, got {type(job).__name__}"
        )
    if not isinstance(job.get("func"), str) or not isinstance(job.get("jid"), str):
        return unparseable(
            raw, queue, "InvalidPayload", "the payload has no string 'func' and 'jid'"
        )
    if not isinstance(job.get("args", []), list) or not isinstance(job.get("kwargs", {}), dict):
        return unparseable(
            raw, queue, "InvalidPayload", "'args' must be a list and 'kwargs' an object"
        )
    return job


def unparseable(
    raw: bytes | str, queue: str | None, error_class: str, message: str
) -> dict[str, Any]:
    if isinstance(raw, bytes):
        text = raw[:RAW_PAYLOAD_LIMIT].decode("utf-8", errors="backslashreplace")
    else:
        text = safe_str(raw, RAW_PAYLOAD_LIMIT)
    now = time.time()
    return {
        "jid": new_jid(),
        "func": UNPARSEABLE,
        "args": [],
        "kwargs": {},
        "queue": queue,
        "retry": False,
        "retry_count": 0,
        "created_at": now,
        "enqueued_at": now,
        "error_class": error_class,
        "error_message": message[:ERROR_MESSAGE_LIMIT],
        "raw_payload": text,
    }


def max_retries(value: Any) -> int:
    """The ``retry`` option as a count: True/None -> 25, False -> 0, an int, a numeric
    string; anything else means no retries (the cautious reading), never a crash."""
    if value is None or value is True:
        return DEFAULT_MAX_RETRIES
    if value is False:
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float):
        return max(int(value), 0) if value == value and abs(value) != float("inf") else 0
    if isinstance(value, str):
        try:
            return max(int(value.strip()), 0)
        except ValueError:
            return 0
    return 0


def retries_exhausted(job: dict[str, Any]) -> bool:
    """True when the failure just recorded (retry_count already +1) was the last allowed."""
    try:
        count = int(job.get("retry_count") or 0)
    except (TypeError, ValueError):
        count = 0
    return count > max_retries(job.get("retry"))


def error_class(exc: BaseException) -> str:
    try:
        cls = type(exc)
        module = cls.__module__
        return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
    except BaseException:  # noqa: BLE001
        return "<unknown>"


def error_message(exc: BaseException) -> str:
    return safe_str(exc, ERROR_MESSAGE_LIMIT)


def traceback_text(exc: BaseException) -> str:
    try:
        text = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    except BaseException:  # noqa: BLE001 - a traceback that can't be formatted is left out
        return ""
    return text[-TRACEBACK_LIMIT:]
