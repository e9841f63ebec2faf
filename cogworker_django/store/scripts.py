"""Lua scripts as files (``lua/<name>.lua``), loaded once, run by EVALSHA.

Scripts share code through an include directive: a line ``--@include <name>`` is
replaced by the text of ``lua/include/<name>.lua`` when the script is loaded (Redis has
no modules for Lua scripts; the script sent, and its SHA, is the expanded text).

A NOSCRIPT reply (a restarted or failed-over server, ``SCRIPT FLUSH``) loads the
script again and retries once: EVALSHA that got NOSCRIPT ran nothing, so the retry
cannot run it twice. Every script file starts with a header naming its KEYS and ARGV.

In a pipeline too a script goes by its SHA (:meth:`Script.pipelined`), and the pipeline
is run by :func:`execute`: a command refused with NOSCRIPT ran nothing, so its script is
loaded and the refused commands run again (in one more round trip), their replies put in
their places, after the pipeline's other commands. Every caller's pipelined commands are independent of their order (a bulk
push already writes its lists, then its zsets, then its scripts). Loading the scripts
before the pipeline instead would cost a round trip each time (SCRIPT EXISTS), and on a
cluster a pipeline's commands go to several nodes that a load sent first might not reach.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis
from redis.exceptions import NoScriptError

from . import runtime


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
        self,
        client: redis.Redis,
        keys: Sequence[str] = (),
        args: Sequence[Any] = (),
        rt: runtime.Runtime | None = None,
    ) -> Any:
        # The runtime's observer, when set: the worker's fetch round-trip counter
        # (telemetry.py). One check per call otherwise.
        observer = (rt or runtime.current()).script_observer
        if observer is not None:
            observer(self.name)
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)

    def pipelined(self, pipe: Any, keys: Sequence[str] = (), args: Sequence[Any] = ()) -> None:
        """Queue an EVALSHA on a pipeline; run the pipeline with :func:`execute` (which
        runs again what the server did not know).

        Not inside MULTI: a script run again would run outside the transaction. Sent as
        a raw command, as EVAL was (redis-py's cluster pipeline has an ``eval()`` of
        another meaning); it is what ``Pipeline.evalsha`` sends anyway."""
        if getattr(pipe, "transaction", False) is True:  # (a method on a cluster pipeline)
            raise ValueError("scripts are pipelined outside MULTI only (transaction=False)")
        keys, args = list(keys), list(args)
        at = len(pipe)
        queued = getattr(pipe, QUEUED, None)
        if queued is None or at == 0:  # none yet, or the pipeline ran since: a new batch
            queued = []
            setattr(pipe, QUEUED, queued)
        queued.append((at, self, keys, args))
        pipe.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)

    def __repr__(self) -> str:
        return f"<Script {self.name}>"


# The attribute of a pipeline that holds the scripts queued on it and not yet run, as
# (position, script, keys, args): kept on the pipeline itself, as its commands are, so
# no state is shared between the threads that each build their own.
QUEUED = "_cogworker_scripts"


def execute(pipe: Any, client: Any, raise_on_error: bool = True) -> list[Any]:
    """Run ``pipe`` (as ``pipe.execute``) and return its replies; the scripts it holds
    that the server answered NOSCRIPT for are loaded and run again on ``client`` (the
    pipeline's own client), their replies put in their places. ``raise_on_error``: raise
    the first error left among the replies, as redis-py does, once every command has run."""
    queued = getattr(pipe, QUEUED, None) or []
    setattr(pipe, QUEUED, None)
    replies = list(pipe.execute(raise_on_error=False))
    refused = [q for q in queued if isinstance(replies[q[0]], NoScriptError)]
    if refused:
        _run_again(client, refused, replies)
    if raise_on_error:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return replies


def _run_again(client: Any, refused: list[Any], replies: list[Any]) -> None:
    """Load each script refused, then run the refused calls again in one pipeline; a call
    refused once more (on a cluster, a master the load did not reach) goes alone, by
    :meth:`Script.__call__`, which loads it there. A failure of the load or of the
    pipeline is every refused call's reply, as the first pipeline's would have been."""
    try:
        for source in {script.sha: script.source for _at, script, _k, _a in refused}.values():
            client.script_load(source)
        again = client.pipeline(transaction=False)
        for _at, script, keys, args in refused:
            script.pipelined(again, keys, args)
        answers = again.execute(raise_on_error=False)
    except Exception as exc:  # noqa: BLE001 - a reply, as the pipeline's are
        for at, _script, _k, _a in refused:
            replies[at] = exc
        return
    for (at, script, keys, args), answer in zip(refused, answers, strict=True):
        if isinstance(answer, NoScriptError):
            try:
                answer = script(client, keys, args)
            except Exception as exc:  # noqa: BLE001 - a reply, as the pipeline's are
                answer = exc
        replies[at] = answer


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


def get(name: str, rt: runtime.Runtime | None = None) -> Script:
    """The script ``name``, read and hashed once per runtime (runtime.py)."""
    cache = (rt or runtime.current()).scripts
    script = cache.get(name)
    if script is None:
        script = cache[name] = Script(name)
    return script


def run(name: str, client: redis.Redis, keys: Sequence[str] = (), args: Sequence[Any] = ()) -> Any:
    rt = runtime.current()  # (asked once: a run is on every job's path)
    return get(name, rt)(client, list(keys), list(args), rt)
