"""The job payload: a JSON object, never pickle.

(Over 400 lines: building, checking, encoding and decoding the one format every other
module reads, kept together so the format has one definition.)

Fields: ``jid``, ``func`` (dotted path of a registered job), ``args``, ``kwargs``,
``queue``, ``retry``, ``retry_count``, ``created_at``, ``enqueued_at``; ``tagged: true``
when the arguments hold tagged values (a UUID, a model instance..., argcodec.py), the
only payloads whose arguments are walked before the run; later stages add
``at``, ``error_class``, ``error_message``, ``failed_at``, ``retried_at``, ``traceback``,
``orphan_count``, ``unique``/``unique_for``/``unique_digest``, ``periodic``...

Building refuses what would not come back as it went in, or would weigh on Redis and
every page that shows the job: a value JSON can't hold, a dict key that is not a string
(JSON would turn ``1`` into ``"1"``), a NaN or infinite number, and a payload over
``MAX_PAYLOAD_BYTES``. Decoding never raises: bytes that are not a JSON object become a
wrapper job that keeps the raw bytes (capped) for the dead set.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable
from typing import Any

from .. import conf
from ..store.codec import CompactJSON, json_string
from ..store.errors import CogworkerError, safe_str
from . import argcodec

DEFAULT_MAX_RETRIES = 25
UNPARSEABLE = "(unparseable)"
RAW_PAYLOAD_LIMIT = 100_000
ERROR_MESSAGE_LIMIT = 10_000

_dumps = CompactJSON()
# A string as JSON (quoted, escaped as the encoder escapes it, non-ASCII kept).
# NaN and infinities refused (ValueError): what a new payload is encoded with.
_strict_dumps = CompactJSON(allow_nan=False)


class PayloadTooLarge(CogworkerError, ValueError):
    """A job's payload is over ``COGWORKER["MAX_PAYLOAD_BYTES"]``: refused at enqueue."""

    def __init__(self, func: str, size: int, limit: int) -> None:
        self.func, self.size, self.limit = func, size, limit
        super().__init__(
            f"{func}: the payload is {size:,} bytes ({human_size(size)}), over "
            f"COGWORKER['MAX_PAYLOAD_BYTES'] = {limit:,} ({human_size(limit)}); pass an id "
            "or a URL to the data (a row, a file in storage) instead of the data itself"
        )


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


def new_jid() -> str:
    # 96 random bits from the OS (what secrets.token_hex uses, minus its overhead).
    return os.urandom(12).hex()


def new_jids(count: int) -> list[str]:
    """``count`` jids as :func:`new_jid` makes them, from one read of the OS's source."""
    pool = os.urandom(12 * count).hex()
    return [pool[i : i + 24] for i in range(0, 24 * count, 24)]


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
    return build_encoded(func, args, kwargs, queue=queue, retry=retry, jid=jid, **extra)[0]


def build_encoded(
    func: str,
    args: tuple | list = (),
    kwargs: dict | None = None,
    *,
    queue: str = "default",
    retry: Any = True,
    jid: str | None = None,
    now: float | None = None,
    **extra: Any,
) -> tuple[dict[str, Any], str]:
    """A new job and its payload text, checked (:func:`check_arguments`, the size) with
    one encoding: a push that writes the job unchanged sends this text."""
    if now is None:
        now = time.time()
    jid = jid or new_jid()
    args_, kwargs_ = list(args), dict(kwargs or {})
    job = {
        "jid": jid,
        "func": func,
        "args": args_,
        "kwargs": kwargs_,
        "queue": queue,
        "retry": retry,
        "retry_count": 0,
        "created_at": now,
        "enqueued_at": now,
    }
    if extra:
        job.update(extra)
    if (args_ or kwargs_) and not (_keys_are_strings(args_) and _keys_are_strings(kwargs_)):
        check_arguments(func, args_, kwargs_)  # raises, naming the key
    try:
        if extra or type(retry) is not bool or type(now) is not float:
            data = _strict_dumps(job)
        else:
            data = _plain_text(jid, func, args_, kwargs_, queue, retry, now)
    except ValueError as exc:
        if "Circular" not in safe_str(exc):
            check_arguments(func, args_, kwargs_)  # raises, naming the NaN or infinity
        raise TypeError(_explain_unserialisable(job, exc)) from None
    except TypeError as exc:
        # A value JSON has no form for: tagged (argcodec.py) when it is one of the types
        # an argument may be, else refused naming it. Plain arguments never come here.
        data = _with_tags(job, exc)
    _check_size_of(job, data)
    return job, data


def _with_tags(job: dict[str, Any], exc: Exception) -> str:
    """The payload text of ``job`` with its arguments in their tagged form (set in
    ``job``, marked ``"tagged": true``); TypeError naming the argument that can't be."""
    func, args, kwargs = job["func"], job["args"], job["kwargs"]
    try:
        tagged_args, tagged = argcodec.tagged_json([args, kwargs])
        job["args"], job["kwargs"] = tagged_args
        if tagged:
            job["tagged"] = True
        return _strict_dumps(job)  # (another field JSON can't hold: explained below)
    except ValueError as error:
        if "Circular" not in safe_str(error):
            check_arguments(func, args, kwargs)  # raises, naming the NaN or infinity
        exc = error
    except TypeError as error:
        exc = error
    job["args"], job["kwargs"] = args, kwargs
    job.pop("tagged", None)
    raise TypeError(_explain_unserialisable(job, exc)) from None


def stored_arguments(
    func: str, args: tuple | list = (), kwargs: dict | None = None
) -> tuple[list[Any], dict[str, Any], bool]:
    """``(args, kwargs, tagged)`` as a payload of ``func`` holds them: checked as an
    enqueue checks them (JSON, or a type with a tagged form: argcodec.py; string keys,
    finite numbers; each refusal naming the argument), in their tagged form when one is
    needed. Reads no settings and sizes nothing: a signature made at import (a
    decorator's callback) uses it before Django is set up."""
    job: dict[str, Any] = {"func": func, "args": list(args), "kwargs": dict(kwargs or {})}
    args_, kwargs_ = job["args"], job["kwargs"]
    if (args_ or kwargs_) and not (_keys_are_strings(args_) and _keys_are_strings(kwargs_)):
        check_arguments(func, args_, kwargs_)  # raises, naming the key
    try:
        _strict_dumps([args_, kwargs_])
    except ValueError as exc:
        if "Circular" not in safe_str(exc):
            check_arguments(func, args_, kwargs_)  # raises, naming the NaN or infinity
        raise TypeError(_explain_unserialisable(job, exc)) from None
    except TypeError as exc:
        _with_tags(job, exc)  # tags them, or raises naming what can't travel
        return job["args"], job["kwargs"], job.get("tagged") is True
    return args_, kwargs_, False


def plain_texts(
    func: str,
    calls: Iterable[tuple[tuple[Any, ...] | list[Any], dict[str, Any]]],
    jids: list[str],
    *,
    queue: str,
    retry: bool,
    now: float,
) -> list[str]:
    """The payload texts of many plain jobs (no field beyond :func:`build_encoded`'s
    own) of one function and queue, enqueued at one ``now``: each byte for byte what
    ``build_encoded(func, args, kwargs, queue=, retry=, jid=, now=)`` returns
    (tests/core/test_payload.py compares them), with the same checks and errors. What is the
    same for every job is written once per call, not once per job: a bulk enqueue spent
    most of its time building a dict per job and walking it. ``jids`` are
    :func:`new_jids`' (hex: nothing to escape). ``calls`` is read one job at a time, as
    the jobs are built (an error is the first job's to have one)."""
    if type(now) is not float:  # (build_encoded writes another type as it is)
        return [
            build_encoded(func, a, k, queue=queue, retry=retry, jid=j, now=now)[1]
            for (a, k), j in zip(calls, jids, strict=True)
        ]
    head = '{"jid":"'
    middle = '","func":' + json_string(func) + ',"args":'
    tail = _plain_tail(queue, retry, now)
    quarter = max_payload_bytes() // 4
    texts: list[str] = []
    append = texts.append
    for (args, kwargs), jid in zip(calls, jids, strict=True):
        if type(kwargs) is not dict:
            # A dict subclass is read as build_encoded reads it, through a copy: a
            # QueryDict's items() would give one value of each key's list.
            kwargs = dict(kwargs)
        try:
            if (args or kwargs) and not (_keys_are_strings(args) and _keys_are_strings(kwargs)):
                raise TypeError
            text = head + jid + middle + _plain_arguments(list(args), kwargs) + tail
        except (TypeError, ValueError):
            text = ""  # build_encoded below raises the error, naming the argument
        if not text or len(text) > quarter:
            # The rare case (refused arguments, or a payload that may be too large):
            # build_encoded's checks and its error, exactly.
            text = build_encoded(func, args, kwargs, queue=queue, retry=retry, jid=jid, now=now)[1]
        append(text)
    return texts


def _plain_text(
    jid: str, func: str, args: list, kwargs: dict, queue: str, retry: bool, now: float
) -> str:
    """The text ``_strict_dumps`` makes of a job with no extra field, byte for byte
    (tests/core/test_payload.py compares them), without walking the dict: the fixed parts
    are literals and only the arguments go through the encoder. Most of a bulk
    enqueue's time was this encoding."""
    return "".join(
        (
            '{"jid":',
            json_string(jid),
            ',"func":',
            json_string(func),
            ',"args":',
            _plain_arguments(args, kwargs),
            _plain_tail(queue, retry, now),
        )
    )


def _plain_arguments(args: list, kwargs: dict) -> str:
    """A plain job's arguments and keyword arguments, as the encoder writes them."""
    return "".join(
        (
            _strict_dumps(args) if args else "[]",
            ',"kwargs":',
            _strict_dumps(kwargs) if kwargs else "{}",
        )
    )


def _plain_tail(queue: str, retry: bool, now: float) -> str:
    """A plain job's text from its queue on (the fields after the arguments)."""
    stamp = repr(now)  # what the encoder writes for a finite float
    return "".join(
        (
            ',"queue":',
            json_string(queue),
            ',"retry":true' if retry else ',"retry":false',
            ',"retry_count":0,"created_at":',
            stamp,
            ',"enqueued_at":',
            stamp,
            "}",
        )
    )


def check_arguments(func: str, args: list, kwargs: dict) -> None:
    """Refuse what JSON would change or can't read back: a dict key that is not a string
    (``{1: "a"}`` would reach the job as ``{"1": "a"}``; TypeError) and a NaN or infinite
    number (``NaN`` is not JSON; ValueError). Each error names the argument and where in
    it the value sits."""
    if _keys_are_strings(args) and _keys_are_strings(kwargs) and _finite(args, kwargs):
        return
    for i, value in enumerate(args):
        _explain_value(func, f"positional argument {i}", value)
    for name, value in kwargs.items():
        if not isinstance(name, str):
            raise TypeError(f"{func}: keyword argument names must be strings, got {name!r}")
        _explain_value(func, f"keyword argument {name!r}", value)


_keys_are_strings = argcodec.keys_are_strings


def _finite(args: list, kwargs: dict) -> bool:
    try:
        _strict_dumps([args, kwargs])
    except ValueError as exc:
        # A circular reference is not a number: encode() names the argument.
        return "Circular" in safe_str(exc)
    except TypeError:
        return True  # not JSON at all: encode() names the argument
    return True


def _explain_value(func: str, where: str, value: Any) -> None:
    # The slow pass, once something is wrong: find it and say where it sits (each
    # container once, as in the fast pass).
    stack: list[tuple[Any, str]] = [(value, "")]
    seen: set[int] = set()
    while stack:
        item, path = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(
                    f"{func}: {where}{_shown(path)} is {item!r}, which JSON can't hold; pass "
                    "a finite number, or None"
                )
        elif isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise TypeError(
                        f"{func}: {where}{_shown(path)} has the key {key!r} "
                        f"({type(key).__name__}); JSON keys are strings, so the job would get "
                        f"{str(key)!r} instead: use string keys"
                    )
                stack.append((inner, f"{path}[{key!r}]"))
        elif isinstance(item, (list, tuple)):
            for i, inner in enumerate(item):
                stack.append((inner, f"{path}[{i}]"))


def _shown(path: str) -> str:
    return f" (at {path})" if path else ""


def max_payload_bytes() -> int:
    return conf.get().MAX_PAYLOAD_BYTES


def check_size(job: dict[str, Any]) -> str:
    """The payload's JSON text, after checking it is JSON (TypeError naming the argument)
    and not over ``MAX_PAYLOAD_BYTES`` (:class:`PayloadTooLarge` naming the job and the
    size)."""
    data = encode(job)
    _check_size_of(job, data)
    return data


def _check_size_of(job: dict[str, Any], data: str) -> None:
    limit = max_payload_bytes()
    # UTF-8 takes 1 to 4 bytes a character: count them only when it could matter.
    if len(data) > limit // 4:
        size = len(data.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise PayloadTooLarge(safe_str(job.get("func")), size, limit)


def encode(job: dict[str, Any]) -> str:
    """JSON text of ``job``; a value JSON can't hold raises TypeError naming the argument."""
    try:
        return _dumps(job)
    except (TypeError, ValueError) as exc:
        raise TypeError(_explain_unserialisable(job, exc)) from None


_PLAIN_DATA = (
    "pass plain data (ids, strings, numbers, lists, dicts) or a UUID, Decimal, datetime, "
    "date, time, timedelta or saved model instance"
)


def _advised(why: str) -> str:
    # A refusal that gives its own advice (an unsaved model instance: save it) needs no
    # more; one that is about JSON says what may travel.
    return f"{why}; {_PLAIN_DATA}" if "JSON" in why else why


def _why_not_json(value: Any) -> str | None:
    """Why ``value`` can't travel in a payload, or None when it can."""
    return argcodec.why_not(value)


def _explain_unserialisable(job: dict[str, Any], exc: Exception) -> str:
    func = job.get("func", "?")
    for i, value in enumerate(job.get("args") or ()):
        why = _why_not_json(value)
        if why:
            return f"{func}: positional argument {i} ({type(value).__name__}) {_advised(why)}"
    for name, value in (job.get("kwargs") or {}).items():
        if not isinstance(name, str):
            return f"{func}: keyword argument names must be strings, got {name!r}"
        why = _why_not_json(value)
        if why:
            return f"{func}: keyword argument {name!r} ({type(value).__name__}) {_advised(why)}"
    return f"{func}: the job is not JSON-serialisable: {safe_str(exc)}"


def is_json(value: Any) -> bool:
    """True when ``value`` is plain JSON (a periodic entry's arguments, which are shown
    and published as they are, must be; a job's arguments may hold tagged values too)."""
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
