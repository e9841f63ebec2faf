"""Signatures: a job and its arguments, checked at once, not yet enqueued.

``send_welcome.s(42, lang="fr")`` (or ``send_welcome.using(queue="low").s(42)``) is what
batch callbacks, chain steps and group members are made of. Its arguments are checked as
an enqueue would check them (JSON, string keys, finite numbers) when the signature is
made, so a bad one fails in the caller, not in a worker hours later.

A signature travels inside Redis as a *spec*: a small JSON object (``func``, ``args``,
``kwargs``, ``queue``, ``retry``, ``results``; ``tagged`` when its arguments hold tagged
values, a UUID or a model instance, as a payload's may: core/argcodec.py) from which
:meth:`Signature.build` makes a fresh payload, in Python (rule 3), each time one is
needed.
"""

from __future__ import annotations

import json
from typing import Any

from ..core import argcodec, payload
from ..store.errors import CogworkerError


class WorkflowError(CogworkerError):
    """A batch, chain or group can't do what was asked (the message says why)."""


class BatchNotFound(WorkflowError, LookupError):
    """No such batch in Redis: never created, or expired (``BATCH_TTL``)."""


class BatchFinished(WorkflowError):
    """The batch's on_success has fired: nothing can join it any more."""


# Options a signature keeps from its job function or using() variant. Unique jobs can't
# be members of a workflow: a refused duplicate would be counted as a member that never
# runs, and the batch would wait for ever.
_KEPT = ("queue", "retry", "on_commit", "using_db")
_NOTHING = object()


class Signature:
    """A job function with its arguments, not yet enqueued (made by ``job.s(...)``)."""

    def __init__(
        self,
        func: str,
        args: tuple | list = (),
        kwargs: dict | None = None,
        options: dict | None = None,
        *,
        wants_results: bool = False,
        enqueuer: Any = None,
        tagged: bool = False,
    ) -> None:
        self.func = func
        self.args = list(args)
        self.kwargs = dict(kwargs or {})
        opts = dict(options or {})
        self.options = {k: opts[k] for k in _KEPT if k in opts}
        self.options.setdefault("queue", "default")
        self.options.setdefault("retry", True)
        self.wants_results = wants_results
        # The job function or using() variant it came from (for enqueue()); None for a
        # signature read back from Redis.
        self.enqueuer = enqueuer
        # The jid its payload is built with, when given in advance (a chain's last step:
        # its reference is returned before it exists); None: a new one each build.
        self.jid: str | None = None
        self.unique = opts.get("unique")
        self._read_back = tagged
        if tagged:  # read back from a spec: the arguments are in their tagged form
            self._json: tuple[list[Any], dict[str, Any], bool] = (self.args, self.kwargs, True)
        else:  # checked as an enqueue checks them, and as a payload will hold them
            self._json = payload.stored_arguments(func, self.args, self.kwargs)

    def with_results(self) -> Signature:
        """This signature, made to receive the return values of the batch's members (a
        list, in the order they were added; None for a member that has not succeeded)
        as its first positional argument when it runs as a callback (group ``then``,
        ``on_success``, ``on_complete``)."""
        options = {**self.options, "unique": self.unique}
        return Signature(
            self.func,
            self.args,
            self.kwargs,
            options,
            wants_results=True,
            enqueuer=self.enqueuer,
            tagged=self._read_back,
        )

    @property
    def queue(self) -> str:
        return self.options["queue"]

    def check_for_workflow(self, role: str) -> None:
        """Refuse what a workflow can't hold (``role`` names the place, for the error)."""
        if self.unique:
            raise WorkflowError(
                f"{self.func}: a unique job (unique={self.unique!r}) can't be {role}: a "
                "refused duplicate would leave its batch waiting for ever"
            )

    def spec(self) -> dict[str, Any]:
        args, kwargs, tagged = self._json
        spec = {
            "func": self.func,
            "args": args,
            "kwargs": kwargs,
            "queue": self.options["queue"],
            "retry": self.options["retry"],
            "results": self.wants_results,
        }
        if tagged:
            spec["tagged"] = True
        if self.jid is not None:
            spec["jid"] = self.jid
        return spec

    def with_jid(self, jid: str) -> Signature:
        """This signature, built with ``jid`` (a chain's last step, referenced ahead)."""
        copy = Signature(
            self.func,
            self.args,
            self.kwargs,
            {**self.options, "unique": self.unique},
            wants_results=self.wants_results,
            enqueuer=self.enqueuer,
            tagged=self._read_back,
        )
        copy.jid = jid
        return copy

    def spec_json(self) -> str:
        return payload.encode(self.spec())

    @classmethod
    def from_spec(cls, spec: Any) -> Signature:
        if isinstance(spec, (str, bytes)):
            spec = json.loads(spec)
        if not isinstance(spec, dict) or not isinstance(spec.get("func"), str):
            raise WorkflowError(f"not a signature: {spec!r}")
        sig = cls(
            spec["func"],
            spec.get("args") or [],
            spec.get("kwargs") or {},
            {"queue": spec.get("queue") or "default", "retry": spec.get("retry", True)},
            wants_results=bool(spec.get("results")),
            tagged=spec.get("tagged") is True,
        )
        if isinstance(spec.get("jid"), str) and spec["jid"]:
            sig.jid = spec["jid"]
        return sig

    def build(self, first: Any = _NOTHING, **extra: Any) -> dict[str, Any]:
        """A fresh payload (new jid) of this signature; ``first`` is put before its
        arguments (a chain step's input). Raises as payload.build does on a value JSON
        can't hold or a payload over MAX_PAYLOAD_BYTES."""
        args, kwargs, tagged = self._json
        if tagged:
            # Arguments in their tagged form already: the input is put in its own (a
            # payload is tagged whole or not at all).
            if first is not _NOTHING:
                try:
                    args = [argcodec.to_json(first)[0], *args]
                except (TypeError, ValueError):
                    payload.build(self.func, [first], {})  # raises, naming the input
                    raise
            extra["tagged"] = True
        else:
            # The arguments as given (the input may need tags: the build adds them).
            args, kwargs = self.args, self.kwargs
            if first is not _NOTHING:
                args = [first, *args]
        if self.jid is not None:
            extra.setdefault("jid", self.jid)
        return payload.build(
            self.func,
            args,
            kwargs,
            queue=self.options["queue"],
            retry=self.options["retry"],
            **extra,
        )

    def enqueue(self) -> str | None:
        """Enqueue it now, as ``job.enqueue(*args, **kwargs)`` would; returns the jid."""
        if self.enqueuer is not None:
            return self.enqueuer.enqueue(*self.args, **self.kwargs)
        from ..core import client

        return client.push(self.build())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Signature) and (self.spec(), self.unique) == (
            other.spec(),
            other.unique,
        )

    def __hash__(self) -> int:
        return hash(self.spec_json())

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.func}.s({', '.join(shown)})"


def signature(value: Any, role: str) -> Signature:
    """``value`` as a workflow's signature, refusing anything else (``role`` names where
    it is used, for the error)."""
    if not isinstance(value, Signature):
        raise TypeError(f"{role} must be a signature (job.s(...)), got {value!r}")
    value.check_for_workflow(role)
    return value
