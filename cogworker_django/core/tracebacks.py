"""A failed job's traceback, as stored with it and shown: the frames of the machinery
that runs a job (this package, Django, the standard library) that come before the job's
own first frame are collapsed into one line. Imports nothing of the package."""

from __future__ import annotations

import os
import re
import sysconfig
import traceback as tb
from typing import Any

# The longest traceback text stored with a failed job (its end is kept).
TRACEBACK_LIMIT = 20_000


def traceback_text(exc: BaseException) -> str:
    """The traceback as stored with a failed job: the frames of the worker running the job
    (cogworker_django, Django, the standard library) that come before the job's own first
    frame are left out, replaced by one line saying how many; frames below the job's (what
    it called) are all kept, and a traceback with no frame of the job is kept whole."""
    try:
        te = tb.TracebackException(type(exc), exc, exc.__traceback__)
        _collapse_chain(te)
        text = "".join(te.format())
    except BaseException:  # noqa: BLE001 - a traceback that can't be formatted is left out
        return ""
    return text[-TRACEBACK_LIMIT:]


class _Collapsed(tb.StackSummary):
    note = ""

    def format(self, *args: Any, **kwargs: Any) -> list[str]:
        return [self.note, *super().format(*args, **kwargs)]


def _collapse_chain(te: tb.TracebackException) -> None:
    seen: set[int] = set()
    todo: list[tb.TracebackException | None] = [te]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        stack = current.stack
        lead = 0
        while lead < len(stack) and is_library_file(stack[lead].filename):
            lead += 1
        if 0 < lead < len(stack):
            kept = _Collapsed()
            kept.extend(stack[lead:])
            kept.note = collapsed_note(lead, [f.filename for f in stack[:lead]])
            current.stack = kept
        todo.extend([current.__cause__, current.__context__])
        todo.extend(getattr(current, "exceptions", None) or ())


def collapsed_note(count: int, filenames: list[str]) -> str:
    names = sorted({library_name(f) for f in filenames})
    return f"  [{count} frame{'s' if count != 1 else ''} of {', '.join(names)} left out]\n"


# The package's root: this module is in its core/ folder.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIR = os.path.join(os.path.abspath(sysconfig.get_paths()["stdlib"]), "")
_THIRD_PARTY = ("django", "asgiref")
# A frame of this package is one under the directory this module was imported from
# (_PACKAGE_DIR), whatever the checkout, a vendored copy or a monorepo folder is named: a
# path component "cogworker_django" alone says nothing (a clone of the repository is named
# so, and its tests' frames are a job's). A stored text written by another install is
# recognised by an installed package's place, under site-packages.
_INSTALLED_PACKAGE = re.compile(r"[/\\](?:site|dist)-packages[/\\]cogworker_django[/\\]")
_LIBRARY_PATTERNS = (
    re.compile(r"[/\\](?:site|dist)-packages[/\\](?:django|asgiref)[/\\]"),
    re.compile(r"[/\\]lib[/\\]python3\.\d+[/\\](?!site-packages|dist-packages)"),
)


def is_library_file(filename: str) -> bool:
    """True for a frame of the machinery that runs a job rather than of the job: this
    package, Django (and asgiref), the standard library."""
    if _is_package_file(filename):
        return True
    path = _absolute(filename)
    if path.startswith(_STDLIB_DIR) and "-packages" + os.sep not in path[len(_STDLIB_DIR) :]:
        return True
    return any(p.search(filename or "") for p in _LIBRARY_PATTERNS)


def _absolute(filename: str) -> str:
    return os.path.abspath(filename) if filename and not filename.startswith("<") else ""


def _is_package_file(filename: str) -> bool:
    return _absolute(filename).startswith(_PACKAGE_DIR) or bool(
        _INSTALLED_PACKAGE.search(filename or "")
    )


def library_name(filename: str) -> str:
    """What a library frame belongs to: cogworker_django, django, or a stdlib module."""
    if _is_package_file(filename):
        return "cogworker_django"
    parts = re.split(r"[/\\]", filename or "")
    for name in _THIRD_PARTY:
        if name in parts[:-1]:
            return name
    for i, part in enumerate(parts):
        if re.fullmatch(r"python3\.\d+", part) and i + 1 < len(parts):
            return parts[i + 1].removesuffix(".py")
    return "the standard library"


_FRAME_LINE = re.compile(r'^  File "(?P<file>[^"]*)", line \d+')


def collapse_traceback(text: str) -> str:
    """:func:`traceback_text`'s collapsing, on a stored text (one written before it, or
    by another version): leading library frames of each traceback become one line."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        if not lines[i].startswith("Traceback (most recent call last):"):
            i += 1
            continue
        i += 1
        frames: list[tuple[str, list[str]]] = []  # (filename, lines) of the leading frames
        while i < len(lines) and (m := _FRAME_LINE.match(lines[i])):
            block = [lines[i]]
            i += 1
            while i < len(lines) and lines[i].startswith("    "):
                block.append(lines[i])
                i += 1
            frames.append((m.group("file"), block))
        lead = 0
        while lead < len(frames) and is_library_file(frames[lead][0]):
            lead += 1
        if 0 < lead < len(frames):
            out.append(collapsed_note(lead, [f for f, _ in frames[:lead]]))
            frames = frames[lead:]
        for _, block in frames:
            out.extend(block)
    return "".join(out)
