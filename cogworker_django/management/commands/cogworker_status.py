"""``manage.py cogworker_status``: a health probe for a worker.

Exit 0 when a worker process of this host (or the one ``--identity`` names) has beaten
within ``--max-age`` seconds (default: three heartbeats), 1 otherwise; one line on
stdout says why either way. It reads Redis through :mod:`cogworker_django.api` (the
processes' presence, as the admin's Processes page does), once, and never waits: an
unreachable Redis is a failed probe.

A beat's age is measured on this host's clock against the worker's own (the ``beat``
field of its presence): the same clock for a worker of this host; with ``--identity`` of
another host, their clocks' difference counts too.
"""

from __future__ import annotations

import math
import socket
import sys
import time

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from cogworker_django import api, checks, conf

# The default --max-age, in heartbeats: one late beat (a slow Redis, a busy host) is not
# a failed probe; three missed in a row are.
BEATS = 3


class Command(BaseCommand):
    help = (
        "A health probe: exit 0 if a worker process of this host (or --identity) has "
        "beaten within --max-age seconds, 1 otherwise, with one line saying why."
    )
    requires_system_checks: list[str] = []  # a probe: nothing but its answer

    def add_arguments(self, parser):
        parser.add_argument(
            "--identity",
            default="",
            help="the worker process to ask about (default: any of this host)",
        )
        parser.add_argument(
            "--max-age",
            type=float,
            metavar="S",
            help="seconds since the last beat (default: three HEARTBEAT_INTERVALs, 15 s)",
        )

    def handle(self, *args, **opts):
        try:
            interval = conf.get().HEARTBEAT_INTERVAL
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        max_age = BEATS * interval if opts["max_age"] is None else opts["max_age"]
        if not math.isfinite(max_age) or max_age <= 0:
            raise CommandError(f"--max-age must be a number of seconds > 0, got {max_age:g}")
        try:
            ok, line = status(opts["identity"], max_age)
        except Exception as exc:  # noqa: BLE001 - a failed probe, said in one line
            ok, line = False, checks.redis_failure(exc)[0]
        self.stdout.write(line)
        if not ok:
            sys.stdout.flush()
            sys.exit(1)


def status(identity: str, max_age: float, now: float | None = None) -> tuple[bool, str]:
    """(healthy, the line saying why) for ``identity``, or for this host's processes."""
    if identity:
        found = api.ProcessSet().get(identity)
        return status_of([found] if found is not None else [], identity, max_age, now)
    return status_of(api.ProcessSet().list(), "", max_age, now)


def status_of(
    listed: list[api.ProcessRecord], identity: str, max_age: float, now: float | None = None
) -> tuple[bool, str]:
    """:func:`status` of the processes ``listed`` (every live one, or the one asked for)."""
    now = time.time() if now is None else now
    if identity:
        candidates = [p for p in listed if p.identity == identity]
        what = f"worker process {identity}"
        if not candidates:
            return False, (
                f"no worker process {identity} is registered (stopped, or silent for longer "
                "than its presence lasts)"
            )
    else:
        host = socket.gethostname()
        candidates = [p for p in listed if p.hostname == host]
        what = f"a worker process of host {host}"
        if not candidates:
            elsewhere = f" ({len(listed)} on other hosts)" if listed else ""
            return False, f"no worker process of host {host} is registered{elsewhere}"
    freshest = max(candidates, key=lambda p: -math.inf if p.beat is None else p.beat)
    age = math.inf if freshest.beat is None else now - freshest.beat
    state = ""
    if freshest.recycling:
        state = f", recycling: {freshest.recycling}"
    elif freshest.quiet:
        state = ", quiet"
    ident = freshest.identity
    if age <= max_age:
        return True, f"ok: {ident} beat {max(age, 0.0):.1f} s ago (max age {max_age:g} s{state})"
    return False, (
        f"{what} has not beaten within {max_age:g} s: the latest, {ident}, beat "
        f"{age:.1f} s ago{state}"
    )
