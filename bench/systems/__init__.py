"""One module per job system, each with the same small interface:

- ``NAME``: the system's name on the command line and in the table.
- ``version() -> str``: the installed version; raises ImportError when not installed.
- ``configs(opts) -> list[tuple[str, str, dict]]``: the configurations to run, each
  (variant, label, params); the variant names it in ``--baseline`` (``rq/simple``).
- ``enqueue(n, spec) -> float``: bulk-enqueue ``n`` jobs the fastest way the system
  supports; returns the seconds the library calls took (Sidekiq and BullMQ: as timed by
  their own enqueue script, ``bench/external.py``).
- ``probe(spec) -> Probe``: how to read its pending and in-flight counts.
- ``drain(n, spec) -> DrainResult``: start one worker process (per ``--processes``) and
  time it draining those jobs (``bench.clock.drain``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

# Table order; cogworker first because every ratio is relative to it.
ORDER = ["cogworker", "rq", "dramatiq", "huey", "celery", "sidekiq", "bullmq"]


def load(name: str) -> ModuleType:
    return importlib.import_module(f"bench.systems.{name}_")
