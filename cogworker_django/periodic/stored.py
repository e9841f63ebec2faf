"""Periodic entries kept in the database: the ``cogworker_django.PeriodicEntry`` model
(edited on the admin's Periodic schedule page), validated exactly like
``COGWORKER_PERIODIC`` (entries.py), and the version key that tells the workers a row
changed.

A save or a delete bumps ``P:periodic:version`` once the transaction commits; every
worker's ticker reads that key each tick and re-reads the table when it moved
(periodic/source.py). A version is fenced: a claim made with an older one is refused
(lua/periodic_claim.lua), so a worker that has not yet seen a change fires nothing the
change removed.

An edit fires no slot twice and skips none after it. Each save stamps the row with
``changed_at`` (its own slots before that second are not its slots: a new entry does not
fire the slot that passed before it was created, a new cron line none of its past
slots) and ``owed_slot``: the slot the previous version had due at that moment (so an
edit made in the seconds after a slot came due, before any worker fired it, still fires
it once; ``last_slot`` tells whether it fired already). A renamed entry is a new one for
its new name; a deleted one leaves its ``last_slot`` behind, so re-creating it fires
nothing of the past either.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, router, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from .. import conf
from ..core import client
from ..store import connection, errors, keys
from . import entries
from .slots import Cron

log = logging.getLogger("cogworker_django")

COMPONENT = "Periodic entries"
# The table's name (Django's default for the model, spelled out for the loader's check).
TABLE = "cogworker_django_periodicentry"
# When a save happens (epoch seconds): tests with a fixed clock replace it.
clock = time.time
UNIQUE_CHOICES = [("", "None"), ("until_executed", "until_executed: runs never overlap")]


class PeriodicEntry(models.Model):
    """A periodic entry stored in the database: the fields of a ``COGWORKER_PERIODIC``
    entry (an empty ``queue`` or ``timezone`` means the default, as a missing key does
    there), plus ``enabled`` and ``description``."""

    name: models.CharField[str, str] = models.CharField(
        max_length=200, unique=True, help_text="Unique; no whitespace. Shown in the job's payload."
    )
    cron: models.CharField[str, str] = models.CharField(
        max_length=200,
        help_text="5 fields (minute hour day month weekday), or 6 with seconds first; "
        "@hourly, @daily, ... too.",
    )
    job: models.CharField[str, str] = models.CharField(
        max_length=255, help_text="The dotted path of a @job function."
    )
    args: models.JSONField[Any, Any] = models.JSONField(
        default=list, blank=True, help_text='A JSON list, e.g. [1, "fr"].'
    )
    kwargs: models.JSONField[Any, Any] = models.JSONField(
        default=dict, blank=True, help_text='A JSON object, e.g. {"lang": "fr"}.'
    )
    queue: models.CharField[str, str] = models.CharField(
        max_length=200, blank=True, default="", help_text="Empty: the job's own queue."
    )
    unique: models.CharField[str, str] = models.CharField(
        max_length=32, blank=True, default="", choices=UNIQUE_CHOICES
    )
    timezone: models.CharField[str, str] = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="A zoneinfo name such as Europe/Paris. Empty: settings.TIME_ZONE.",
    )
    enabled: models.BooleanField[bool, bool] = models.BooleanField(default=True)
    description: models.TextField[str, str] = models.TextField(blank=True, default="")
    # Stamped by save(): see the module docstring.
    changed_at: models.DateTimeField[dt.datetime | None, dt.datetime | None] = models.DateTimeField(
        null=True, editable=False
    )
    owed_slot: models.BigIntegerField[int | None, int | None] = models.BigIntegerField(
        null=True, editable=False
    )

    class Meta:
        db_table = TABLE
        ordering = ["name"]
        verbose_name = "periodic entry"
        verbose_name_plural = "Periodic schedule"
        # view: the page; change: edit, disable / enable / run now (any entry); add and
        # delete: database entries. (view and change are the permissions the page had
        # before entries could be stored: a group keeps them.)
        default_permissions = ("add", "change", "delete", "view")

    def __str__(self) -> str:
        return self.name

    # The entry as the ticker runs it --------------------------------------------------

    def raw(self) -> dict[str, Any]:
        """The row as a ``COGWORKER_PERIODIC`` entry (empty means "the default")."""
        return {
            "cron": self.cron,
            "job": self.job,
            "args": self.args if self.args is not None else [],
            "kwargs": self.kwargs if self.kwargs is not None else {},
            "queue": self.queue or None,
            "unique": self.unique or None,
            "timezone": self.timezone or None,
        }

    def since(self) -> int | None:
        return None if self.changed_at is None else math.floor(self.changed_at.timestamp())

    def entry(self) -> entries.Entry:
        """The validated entry (ImproperlyConfigured naming every bad field)."""
        return entries.parse_entry(
            self.name,
            self.raw(),
            source=entries.DATABASE,
            since=self.since(),
            owed=self.owed_slot,
        )

    # Validation (full_clean, and so the admin's form) ---------------------------------

    def clean(self) -> None:
        found: dict[str, list[str]] = {}
        if not conf.valid_name(self.name):
            found["name"] = ["Expected a non-empty name without whitespace."]
        elif self.name in settings_names():
            found["name"] = [
                f"{self.name!r} is an entry of COGWORKER_PERIODIC (settings): pick another name."
            ]
        try:
            entries.import_job_modules()
        except Exception as exc:  # noqa: BLE001 - said on the field it concerns
            found.setdefault("job", []).append(
                f"The job modules can't be imported: {errors.describe(exc)}"
            )
        _, problems = entries.check_fields(self.name, self.raw())
        for problem in problems:
            found.setdefault(problem.key, []).append(_sentence(problem.why))
        if found:
            raise ValidationError(found)

    # Saving: the stamps, then the version bump once committed ------------------------

    def save(self, *args: Any, **kwargs: Any) -> None:
        now = clock()
        using = kwargs.get("using") or router.db_for_write(type(self), instance=self)
        previous = None
        if self.pk is not None:
            previous = type(self)._default_manager.using(using).filter(pk=self.pk).first()
        self.owed_slot = owed(previous, self.name, now)
        self.changed_at = dt.datetime.fromtimestamp(now, dt.UTC)
        super().save(*args, **kwargs)


def owed(previous: PeriodicEntry | None, name: str, now: float) -> int | None:
    """The slot ``previous`` (the row before this save) had due at ``now``, when it was
    enabled, valid and kept its name: whether it fired is ``last_slot``'s to say."""
    if previous is None or previous.name != name or not previous.enabled:
        return None
    # Only its schedule matters (the job need not be importable in this process: a save
    # from a shell that imported no job module).
    try:
        slot = Cron(previous.cron, previous.timezone or entries.default_timezone()).latest(now)
    except Exception:  # noqa: BLE001 - an invalid previous version had nothing due
        return None
    since = previous.since()
    return previous.owed_slot if since is not None and slot < since else slot


def _sentence(why: str) -> str:
    return why[:1].upper() + why[1:] + ("" if why.endswith(".") else ".")


def settings_names() -> set[str]:
    try:
        return set(conf.periodic_raw())
    except Exception:  # noqa: BLE001 - a bad setting is reported by the checks
        return set()


def next_fire_times(
    cron: str, zone: str | None, count: int = 5, now: float | None = None
) -> list[dt.datetime]:
    """The next ``count`` slots of ``cron`` in ``zone`` (settings.TIME_ZONE when empty),
    as aware datetimes in that zone; CronError (or ValueError for the zone) when bad."""
    from zoneinfo import ZoneInfo

    name = zone or entries.default_timezone()
    schedule = Cron(cron, name)
    at = time.time() if now is None else now
    found = []
    for _ in range(count):
        at = schedule.next(at)
        found.append(dt.datetime.fromtimestamp(at, ZoneInfo(name)))
    return found


# The version key -------------------------------------------------------------------------


def announce(using: str) -> None:
    """Bump the version once the current transaction on ``using`` commits (at once
    outside one): the workers re-read the table at their next tick."""
    transaction.on_commit(bump, using=using, robust=True)


def bump() -> bool:
    """INCR ``P:periodic:version`` (best-effort: when Redis is away, the workers see the
    change at their next periodic re-read of the table). Nothing under a test mode
    (``testing.fake()``, ``TESTING``): no worker reads that Redis."""
    if client.active_sink() is not None:
        return False
    return errors.best_effort(
        COMPONENT,
        lambda: connection.get_client().incr(keys.periodic_version()),
        f"{keys.periodic_version()} not bumped: the workers see the change at their next "
        "re-read of the table (within a minute)",
    )


@receiver(post_save, sender=PeriodicEntry, dispatch_uid="cogworker_django.periodic.saved")
def _saved(sender: Any, instance: PeriodicEntry, using: str, **kwargs: Any) -> None:
    announce(using)


@receiver(post_delete, sender=PeriodicEntry, dispatch_uid="cogworker_django.periodic.deleted")
def _deleted(sender: Any, instance: PeriodicEntry, using: str, **kwargs: Any) -> None:
    announce(using)
