"""Lua scripts as files (``lua/<name>.lua``), loaded once, run by EVALSHA.

Scripts share code through an include directive: a line ``--@include <name>`` is
replaced by the text of ``lua/include/<name>.lua`` when the script is loaded (Redis has
no modules for Lua scripts; the script sent, and its SHA, is the expanded text).

A NOSCRIPT reply (a restarted or failed-over server, ``SCRIPT FLUSH``) loads the
script again and retries once: EVALSHA that got NOSCRIPT ran nothing, so the retry
cannot run it twice. Every script file starts with a header naming its KEYS and ARGV.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import redis
from redis.exceptions import NoScriptError

# When set, called with the script's name before every run by EVALSHA: the worker's
# fetch round-trip counter (telemetry.py). One check per call otherwise.
observer: Callable[[str], None] | None = None


class Script:
    def __init__(self, name: str) -> None:
        self.name = name
        text = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()
        header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
        if "KEYS" not in header or "ARGV" not in header:
            raise RuntimeError(f"lua/{name}.lua must start with a header naming KEYS and ARGV")
        self.source = expand(text, name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    def __call__(
        self, client: redis.Redis, keys: Sequence[str] = (), args: Sequence[Any] = ()
    ) -> Any:
        if observer is not None:
            observer(self.name)
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)

    def pipelined(self, pipe: Any, keys: Sequence[str] = (), args: Sequence[Any] = ()) -> None:
        """Queue an EVAL on a pipeline (pipelines can't recover from NOSCRIPT mid-batch).

        Sent as a raw command: redis-py's cluster pipeline has an ``eval()`` of another
        meaning, and this is what ``Pipeline.eval`` sends anyway."""
        pipe.execute_command("EVAL", self.source, len(keys), *keys, *args)

    def __repr__(self) -> str:
        return f"<Script {self.name}>"


INCLUDE = "--@include "


def expand(text: str, name: str, parts: Any = None) -> str:
    """``text`` with each ``--@include <part>`` line replaced by ``lua/include/<part>.lua``
    (one level: an included part includes nothing). ``parts``: another folder of parts."""
    if parts is None:
        parts = resources.files(__package__).joinpath("lua", "include")
    out = []
    for line in text.splitlines(keepends=True):
        if not line.startswith(INCLUDE):
            out.append(line)
            continue
        part = line[len(INCLUDE) :].strip()
        found = parts.joinpath(f"{part}.lua")
        if not part.isidentifier() or not found.is_file():
            raise RuntimeError(f"lua/{name}.lua includes {part!r}: no lua/include/{part}.lua")
        body = found.read_text()
        if any(x.startswith(INCLUDE) for x in body.splitlines()):
            raise RuntimeError(f"lua/include/{part}.lua includes another part: one level only")
        out.append(body if body.endswith("\n") else body + "\n")
    return "".join(out)


_cache: dict[str, Script] = {}


def get(name: str) -> Script:
    script = _cache.get(name)
    if script is None:
        script = _cache[name] = Script(name)
    return script


def run(name: str, client: redis.Redis, keys: Sequence[str] = (), args: Sequence[Any] = ()) -> Any:
    return get(name)(client, list(keys), list(args))
