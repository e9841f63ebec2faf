"""Values JSON has no form for, carried in a job's arguments (and kept results) as tagged
JSON: ``{"__cw__": <type>, "v": <value>}``.

(Over 400 lines: writing the form, reading it back and saying why a value can't be
written are one format's three sides, kept together so it has one definition.)

=============  ==============================================================
type           ``"v"``
=============  ==============================================================
``uuid``       ``"7c9e6679-7425-40de-944b-e07fc1f90ae7"`` (``str(UUID)``)
``decimal``    ``"12.50"`` (``str(Decimal)``: digits and exponent kept)
``datetime``   ``"2025-03-30T01:30:00+01:00"`` (ISO 8601; no offset: naive)
``date``       ``"2025-03-30"``
``time``       ``"14:05:00.250000"`` (ISO 8601; an offset when it has a fixed one)
``timedelta``  ``[days, seconds, microseconds]`` (integers)
``model``      ``["app_label.ModelName", pk]`` (the pk itself tagged when it must be)
``dict``       a dict that has a ``"__cw__"`` key of its own, kept as it is
=============  ==============================================================

docs/jobs.md ("What an argument may be") is the reference other languages' clients
write from. Plain JSON pays nothing: the encoder calls :func:`_Tagger.default` only for
a value it has no form for, and a payload carries ``"tagged": true`` only when a tag was
written, so only those are walked at run time (payload.py, jobs.resolve). A model
instance travels by reference and is loaded fresh, through its ``_default_manager``,
when the value is restored.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import threading
import uuid
from collections.abc import Callable
from typing import Any, cast

from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.db.models import Model

from ..store.codec import CompactJSON
from ..store.errors import CogworkerError

TAG = "__cw__"
# How a tag's key is written in compact JSON text: inside a string a quote is always
# escaped, so this text is a dict key "__cw__" (or the rare key ending in an escaped
# quote and "__cw__"): a hint, never taken for a tag by itself.
_TAG_TEXT = '"' + TAG + '":'
_TAG_BYTES = _TAG_TEXT.encode()

Loader = Callable[[str, Any], Any]


class ArgumentGone(CogworkerError, ObjectDoesNotExist):
    """A model instance passed to a job has no row any more when the job runs (deleted
    since the enqueue): the run goes to dead without a retry. ``label``, ``pk`` and
    ``where`` (the argument) say which; the message says them too."""

    label: str = ""
    pk: Any = None
    where: str = ""


def _gone(label: str, pk: Any, where: str = "") -> ArgumentGone:
    at = f" ({where})" if where else ""
    exc = ArgumentGone(
        f"{label} with pk {pk!r}{at} no longer exists: deleted since the enqueue, or never "
        "committed (inside a transaction, enqueue with on_commit=True)"
    )
    exc.label, exc.pk, exc.where = label, pk, where
    return exc


class BadTag(CogworkerError, ValueError):
    """A tagged value that can't be read back (an unknown type, a malformed value, a
    model that is not installed here)."""


class _Refused(CogworkerError, TypeError):
    """A value of a known type that can't travel (``why`` says so)."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


class _Escaped:
    """A user's dict that has a ``"__cw__"`` key: written as a ``dict`` tag (not a dict
    subclass, so that the encoder hands it to :meth:`_Tagger.default`)."""

    __slots__ = ("inner",)

    def __init__(self, inner: dict[str, Any]) -> None:
        self.inner = inner


def _model_tag(value: Model) -> dict[str, Any]:
    label = value._meta.label
    if value._state.adding or value.pk is None:
        raise _Refused(
            f"is an unsaved {label} (it has no row yet): save it before enqueueing, or pass its pk"
        )
    return {TAG: "model", "v": [label, value.pk]}


def _time_text(value: dt.time) -> str:
    if value.tzinfo is not None and value.utcoffset() is None:
        raise _Refused(
            f"is a time whose zone ({value.tzinfo}) has no fixed offset without a date; pass "
            "a datetime, or a time with a fixed offset (datetime.timezone)"
        )
    return value.isoformat()


# Exact types first (the common case); subclasses are looked for in this order (a
# datetime is a date) and come back as the standard type.
_WRITERS: tuple[tuple[type, Callable[[Any], dict[str, Any]]], ...] = (
    (uuid.UUID, lambda v: {TAG: "uuid", "v": str(v)}),
    (decimal.Decimal, lambda v: {TAG: "decimal", "v": str(v)}),
    (dt.datetime, lambda v: {TAG: "datetime", "v": v.isoformat()}),
    (dt.date, lambda v: {TAG: "date", "v": v.isoformat()}),
    (dt.time, lambda v: {TAG: "time", "v": _time_text(v)}),
    (dt.timedelta, lambda v: {TAG: "timedelta", "v": [v.days, v.seconds, v.microseconds]}),
)
_EXACT = dict(_WRITERS)


def _tag_of(value: Any) -> dict[str, Any]:
    """The tagged form of one value JSON has no form for; TypeError when it has none."""
    writer = _EXACT.get(type(value))
    if writer is not None:
        return writer(value)
    if isinstance(value, _Escaped):
        return {TAG: "dict", "v": value.inner}
    if isinstance(value, Model):
        return _model_tag(value)
    for kind, writer in _WRITERS:
        if isinstance(value, kind):
            return writer(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _Tagger(threading.local):
    """A compact, strict JSON encoder (per thread) whose ``default`` writes tags and
    counts them, so that a text holding more tag keys than it wrote is known to hold a
    user's dict with that key (escaped then, see :func:`_tagged_text`)."""

    def __init__(self) -> None:
        self.count = 0
        self.encode = CompactJSON(allow_nan=False, default=self.default)

    def default(self, value: Any) -> Any:
        tag = _tag_of(value)
        self.count += 1
        return tag

    def text(self, value: Any) -> tuple[str, int]:
        self.count = 0
        text = self.encode(value)
        return text, self.count


_tagger = _Tagger()
_plain = CompactJSON(allow_nan=False)


def _escaped(value: Any) -> Any:
    """``value`` with every dict that has a ``"__cw__"`` key wrapped as :class:`_Escaped`
    (only called on a value the encoder walked already: it holds no cycle)."""
    if isinstance(value, dict):
        inner = {k: _escaped(v) for k, v in value.items()}
        return _Escaped(inner) if TAG in value else inner
    if isinstance(value, (list, tuple)):
        return [_escaped(v) for v in value]
    return value


def _tagged_text(value: Any) -> tuple[str, bool]:
    """Compact JSON of ``value`` with tags, and whether the text holds a tag."""
    text, written = _tagger.text(value)
    if text.count(_TAG_TEXT) > written:  # a user's dict with the tag key: escape it
        text, written = _tagger.text(_escaped(value))
    return text, written > 0


# Writing ---------------------------------------------------------------------------------


def to_json(value: Any) -> tuple[Any, bool]:
    """``(json_value, tagged)``: ``value`` itself and False when it is plain JSON with no
    ``"__cw__"`` key anywhere; else :func:`tagged_json`'s. TypeError or ValueError (NaN,
    a circular reference) as the encoder raises them, for a value that can't travel
    (:func:`why_not` says why)."""
    try:
        text = _plain(value)
    except TypeError:
        return tagged_json(value)  # a value JSON has no form for
    if _TAG_TEXT not in text:
        return value, False
    return tagged_json(value)


def tagged_json(value: Any) -> tuple[Any, bool]:
    """``value``'s tagged form as plain JSON data (what a walked payload holds: a
    user's dict with a ``"__cw__"`` key escaped), and whether a tag was written;
    :func:`restore` turns it back. For a value the plain encoder refused already."""
    text, tagged = _tagged_text(value)
    return json.loads(text), tagged


def dumps(value: Any) -> str:
    """Compact JSON text of ``value``, tagged where it must be; :func:`loads` reads it
    back. TypeError naming what can't be kept (and where in ``value``)."""
    try:
        text = _plain(value)
    except (TypeError, ValueError):
        text = None
    if text is not None and _TAG_TEXT not in text and keys_are_strings(value):
        return text
    why = why_not(value)
    if why is not None:
        raise TypeError(f"the value ({type(value).__name__}) {why}")
    return _tagged_text(value)[0]


# Reading ---------------------------------------------------------------------------------


class _NeedsDatabase(CogworkerError):
    """Raised by the loader of :func:`arestore_arguments`' first pass on the loop."""


def load_model(label: str, pk: Any) -> Model:
    """The row of model ``label`` with this pk, read now through its ``_default_manager``;
    :class:`ArgumentGone` when there is none, :class:`BadTag` for a model not installed."""
    from django.apps import apps

    try:
        model = apps.get_model(label)
    except (LookupError, ValueError) as exc:
        raise BadTag(f"the model {label!r} is not installed here ({exc})") from None
    if isinstance(pk, list):
        pk = tuple(pk)  # a composite primary key (JSON has no tuple)
    try:
        return model._default_manager.get(pk=pk)
    except model.DoesNotExist:
        raise _gone(model._meta.label, pk) from None
    except (ValidationError, ValueError, TypeError) as exc:
        raise BadTag(f"{model._meta.label} pk {pk!r} is not a valid pk: {exc}") from None


def _no_database(label: str, pk: Any) -> Any:
    raise _NeedsDatabase


def _untag(value: dict[str, Any], load: Loader) -> Any:
    kind, v = value[TAG], value.get("v")
    v = cast(Any, v)
    try:
        if kind == "uuid":
            return uuid.UUID(v)
        if kind == "decimal":
            if not isinstance(v, str):
                raise TypeError("expected a string")
            return decimal.Decimal(v)
        if kind == "datetime":
            return dt.datetime.fromisoformat(v)
        if kind == "date":
            return dt.date.fromisoformat(v)
        if kind == "time":
            return dt.time.fromisoformat(v)
        if kind == "timedelta":
            days, seconds, micro = v
            if not all(type(n) is int for n in (days, seconds, micro)):
                raise TypeError("expected three integers")
            return dt.timedelta(days=days, seconds=seconds, microseconds=micro)
        if kind == "model":
            label, pk = v
            if not isinstance(label, str):
                raise TypeError("expected [label, pk]")
            return load(label, restore(pk, load))
        if kind == "dict":
            if not isinstance(v, dict):
                raise TypeError("expected an object")
            return {k: restore(x, load) for k, x in v.items()}
    except (BadTag, ArgumentGone, _NeedsDatabase):
        raise
    except (TypeError, ValueError, ArithmeticError, AttributeError) as exc:
        raise BadTag(f"the tagged value {_shown(value)} can't be read: {exc}") from None
    raise BadTag(
        f"the tagged value {_shown(value)} has an unknown type {kind!r} (written by a newer "
        "release? upgrade this worker)"
    )


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 200 else text[:200] + "..."


def restore(value: Any, load: Loader = load_model) -> Any:
    """A value read from JSON with its tags turned back (models through ``load``)."""
    kind = type(value)
    if kind is dict:
        if TAG in value:
            return _untag(value, load)
        return {k: restore(v, load) for k, v in value.items()}
    if kind is list:
        return [restore(v, load) for v in value]
    return value


def restore_arguments(
    args: list[Any], kwargs: dict[str, Any], load: Loader = load_model
) -> tuple[list[Any], dict[str, Any]]:
    """A tagged payload's arguments as the job receives them (models loaded now).
    :class:`ArgumentGone` names the argument of a row gone."""
    where = ""
    try:
        restored = []
        for i, value in enumerate(args):
            where = f"positional argument {i}"
            restored.append(restore(value, load))
        named = {}
        for name, value in kwargs.items():
            where = f"keyword argument {name!r}"
            named[name] = restore(value, load)
    except ArgumentGone as exc:
        raise _gone(exc.label, exc.pk, where) from None
    except BadTag as exc:
        raise BadTag(f"{where}: {exc}") from None
    return restored, named


async def arestore_arguments(
    args: list[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """:func:`restore_arguments` from a coroutine: on the loop when no model is to be
    loaded, else on Django's thread for sync code (``sync_to_async``), as an async view
    reads the database: the loop is never blocked on a query."""
    try:
        return restore_arguments(args, kwargs, _no_database)
    except _NeedsDatabase:
        from asgiref.sync import sync_to_async

        return await sync_to_async(restore_arguments, thread_sensitive=True)(args, kwargs)


def loads(text: str | bytes) -> Any:
    """The value of a :func:`dumps` text (or any JSON), tags turned back, models loaded
    now."""
    value = json.loads(text)
    if _has_tag(text):
        value = restore(value)
    return value


def _has_tag(text: str | bytes) -> bool:
    return _TAG_BYTES in text if isinstance(text, bytes) else _TAG_TEXT in text


async def aloads(text: str | bytes) -> Any:
    """:func:`loads` from a coroutine (a model is loaded off the loop)."""
    value = json.loads(text)
    if _has_tag(text):
        try:
            value = restore(value, _no_database)
        except _NeedsDatabase:
            from asgiref.sync import sync_to_async

            value = await sync_to_async(restore, thread_sensitive=True)(value)
    return value


# Why a value can't travel ---------------------------------------------------------------

_SCALARS = frozenset((str, int, float, bool, type(None)))


def keys_are_strings(value: Any) -> bool:
    """True when every dict in ``value`` has string keys only. The fast pass: containers
    only (a list of a million numbers is one comprehension); each container is walked
    once (a shared one is checked already, and a list that holds itself must not walk
    forever: the encoder then refuses the cycle)."""
    stack = [value]
    seen: set[int] | None = None  # (made only for nested containers)
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return False
            nested = [v for v in item.values() if type(v) not in _SCALARS]
        elif isinstance(item, (list, tuple)):
            nested = [v for v in item if type(v) not in _SCALARS]
        else:
            continue
        if nested:
            if seen is None:
                seen = {id(value)}
            for v in nested:
                if id(v) not in seen:
                    seen.add(id(v))
                    stack.append(v)
    return True


def _a(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _at(path: str) -> str:
    return f" (at {path})" if path else ""


def why_not(value: Any) -> str | None:
    """Why ``value`` can't travel in a payload or be kept as a result, naming where in it
    the culprit sits ("is not JSON-serialisable", "holds a set (at [2]), ..."); None when
    it can."""
    try:
        _tagger.text(value)
    except ValueError as exc:
        if "Circular" in str(exc):
            return "holds itself (a circular reference), which JSON can't hold"
    except TypeError:
        pass
    else:
        if keys_are_strings(value):
            return None
    # Find the culprit (each container once, as the encoder would meet it).
    stack: list[tuple[Any, str]] = [(value, "")]
    seen: set[int] = set()
    while stack:
        item, path = stack.pop()
        kind = type(item)
        if kind in _SCALARS:
            if kind is float and not math.isfinite(item):
                what = f"holds {item!r} (at {path})" if path else f"is {item!r}"
                return f"{what}, which JSON can't hold"
            continue
        if isinstance(item, (dict, list, tuple)):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, dict):
                for key, inner in item.items():
                    if not isinstance(key, str):
                        return (
                            f"has the key {key!r}{_at(path)} ({type(key).__name__}); JSON keys "
                            "are strings"
                        )
                    stack.append((inner, f"{path}[{key!r}]"))
            else:
                stack.extend((inner, f"{path}[{i}]") for i, inner in enumerate(item))
            continue
        try:
            tagged = _tag_of(item)
        except _Refused as exc:
            return f"holds at {path} a value that {exc.why}" if path else exc.why
        except TypeError:
            if not path:
                return "is not JSON-serialisable"
            return f"is not JSON-serialisable: it holds {_a(kind.__name__)}{_at(path)}"
        if tagged[TAG] == "model":
            stack.append((tagged["v"][1], f"{path}.pk"))
    return None
