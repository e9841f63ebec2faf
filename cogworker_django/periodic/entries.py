"""Periodic entries: parsing and validating ``COGWORKER_PERIODIC`` (and, with the same
checks, the database's entries: periodic/stored.py).

Each entry is checked field by field; a bad one raises ``ImproperlyConfigured`` naming
the entry and every bad field (one line each), at worker start (the Periodic plugin's
``validate``, worker/plugins.py) and in ``manage.py check``. ``job`` must name a
registered ``@job``, so :func:`load` imports the ``jobs`` and ``tasks`` modules of
installed apps first (as the worker command does) and resolves every callable here, on
the calling (main) thread (rule 10). A database entry's job is looked up in the same
registry (no import: the worker imported its job modules at boot).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ImproperlyConfigured

from .. import conf
from ..core import jobs, payload
from ..store.errors import CogworkerError
from .slots import Cron, CronError

FIELDS = ("cron", "job", "args", "kwargs", "queue", "unique", "timezone")
UNIQUE_MODES = (None, "until_executed")
# Where an entry comes from: the setting, or a row of cogworker_django.PeriodicEntry.
SETTINGS = "settings"
DATABASE = "database"


class FieldProblem(CogworkerError, ImproperlyConfigured):
    """One bad field of one entry: ``key`` and ``why`` (for a form's field errors); its
    text names the setting, the entry and the value."""

    def __init__(self, name: Any, key: str, value: Any, why: str) -> None:
        self.key, self.value, self.why = key, value, why
        super().__init__(f"COGWORKER_PERIODIC[{name!r}][{key!r}] = {value!r} is invalid: {why}.")


@dataclass(frozen=True)
class Entry:
    """One validated entry. ``function`` is the resolved ``@job``."""

    name: str
    cron: str
    job: str
    args: tuple
    kwargs: dict
    queue: str
    unique: str | None
    timezone: str
    schedule: Cron = field(compare=False, repr=False)
    function: jobs.JobFunction = field(compare=False, repr=False)
    source: str = SETTINGS
    # A database entry's last change (epoch, whole seconds): its own slots before it were
    # not its slots. ``owed``: the slot its previous version had due then, if any (an
    # edit skips no slot: periodic/stored.py). None for a settings entry.
    since: int | None = None
    owed: int | None = None

    @property
    def until_executed(self) -> bool:
        return self.unique == "until_executed"

    def due(self, now: float) -> int | None:
        """The slot to fire at ``now``: the latest at or before it, unless that came
        before this version of the entry existed (then the slot its previous version had
        due at the change, or None)."""
        slot = self.schedule.latest(now)
        if self.since is not None and slot < self.since:
            return self.owed
        return slot

    def as_dict(self) -> dict[str, Any]:
        """What is published to ``P:periodic:schedule`` and shown in the admin."""
        return {
            "name": self.name,
            "cron": self.cron,
            "job": self.job,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "queue": self.queue,
            "unique": self.unique,
            "timezone": self.timezone,
            "source": self.source,
        }

    def build_job(self, *, slot: int | None = None) -> dict[str, Any]:
        """The payload of one run: the job's own options (retry, its own unique lock)
        with this entry's queue, plus ``periodic`` (the entry name), ``periodic_slot``
        (epoch; absent for a run started from the admin) and, for ``until_executed``,
        ``periodic_until_executed`` (which tells locks.job_locks about the running lock)."""
        # _build is the one place a job's options become a payload (jobs.py).
        job = self.function.using(queue=self.queue)._build(self.args, self.kwargs)
        job["periodic"] = self.name
        if slot is not None:
            job["periodic_slot"] = slot
        if self.until_executed:
            job["periodic_until_executed"] = True
        return job


def _bad(name: str, key: str, value: Any, why: str) -> FieldProblem:
    return FieldProblem(name, key, value, why)


def default_timezone() -> str:
    from django.conf import settings

    return getattr(settings, "TIME_ZONE", None) or "UTC"


def parse_entry(name: Any, raw: Any, **origin: Any) -> Entry:
    """Validate one entry; ImproperlyConfigured naming the entry and the field (every
    bad field: one line each). ``origin``: ``source``, ``since``, ``owed`` of a database
    entry."""
    _check_shape(name, raw)
    entry, problems = check_fields(name, raw, **origin)
    if problems:
        if len(problems) == 1:
            raise problems[0]
        raise ImproperlyConfigured("\n".join(str(p) for p in problems))
    assert entry is not None
    return entry


def check_fields(
    name: str, raw: dict[str, Any], **origin: Any
) -> tuple[Entry | None, list[FieldProblem]]:
    """The entry, or every bad field (a form shows each beside its field)."""
    # Every field is checked before raising: one message names all that are wrong.
    problems: list[FieldProblem] = []
    zone = _zone(name, raw, problems)
    schedule = _schedule(name, raw, zone, problems)
    path, function = _job(name, raw, problems)
    args, kwargs = _arguments(name, raw, function, problems)
    queue = _queue(name, raw, function, problems)
    unique = raw.get("unique", None)
    if unique not in UNIQUE_MODES:
        problems.append(_bad(name, "unique", unique, "expected None or 'until_executed'"))
    if problems:
        return None, problems
    assert schedule is not None and function is not None and isinstance(zone, str)
    assert isinstance(path, str) and isinstance(queue, str)
    entry = Entry(
        name=name,
        cron=schedule.expr,
        job=path,
        args=tuple(args),
        kwargs=dict(kwargs),
        queue=queue,
        unique=unique,
        timezone=zone,
        schedule=schedule,
        function=function,
        **origin,
    )
    return entry, []


def _check_shape(name: Any, raw: Any) -> None:
    """The entry's name and its dict of known fields: nothing else can be judged
    without them, so these raise at once."""
    if not conf.valid_name(name):
        raise ImproperlyConfigured(
            f"COGWORKER_PERIODIC: entry name {name!r} is invalid: expected a non-empty "
            "string without whitespace."
        )
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(
            f"COGWORKER_PERIODIC[{name!r}] must be a dict with 'cron' and 'job', got "
            f"{type(raw).__name__}."
        )
    unknown = sorted(set(raw) - set(FIELDS), key=str)
    if unknown:
        raise ImproperlyConfigured(
            f"COGWORKER_PERIODIC[{name!r}] has unknown field(s) "
            f"{', '.join(map(repr, unknown))}; allowed: {', '.join(FIELDS)}."
        )


def _zone(name: str, raw: dict[str, Any], problems: list[FieldProblem]) -> Any:
    zone = raw.get("timezone", None)
    if zone is None:
        zone = default_timezone()
    if not isinstance(zone, str) or not zone:
        problems.append(
            _bad(name, "timezone", zone, "expected a time zone name such as 'Europe/Paris'")
        )
        return zone
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        problems.append(_bad(name, "timezone", zone, "not a known time zone (zoneinfo)"))
    return zone


def _schedule(
    name: str, raw: dict[str, Any], zone: Any, problems: list[FieldProblem]
) -> Cron | None:
    if "cron" not in raw:
        problems.append(_bad(name, "cron", None, "required, e.g. '0 3 * * *'"))
        return None
    try:
        # (with a bad zone, the cron expression is still checked, in UTC)
        return Cron(raw["cron"], zone if not problems else "UTC")
    except CronError as exc:
        problems.append(_bad(name, "cron", raw["cron"], str(exc)))
        return None


def _job(name: str, raw: dict[str, Any], problems: list[FieldProblem]) -> tuple[Any, Any]:
    """The entry's job path and its registered function (None when it isn't one)."""
    path = raw.get("job")
    if not isinstance(path, str) or not path:
        problems.append(_bad(name, "job", path, "expected the dotted path of a @job function"))
        return path, None
    function = jobs.registered(path)
    if function is None:
        close = difflib.get_close_matches(
            path, [f.path for f in jobs.registered_jobs()], n=1, cutoff=0.6
        )
        problems.append(
            _bad(
                name,
                "job",
                path,
                "not a registered @job"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; {jobs.where_jobs_live()}",
            )
        )
    return path, function


def _arguments(
    name: str, raw: dict[str, Any], function: Any, problems: list[FieldProblem]
) -> tuple[Any, Any]:
    """``args`` and ``kwargs``, each JSON, and (when both are) accepted by the job."""
    args = raw.get("args", [])
    if args is None:
        args = []
    args_bad = not isinstance(args, (list, tuple)) or not payload.is_json(list(args))
    if args_bad:
        problems.append(_bad(name, "args", args, "expected a list of JSON-serialisable values"))
    kwargs = raw.get("kwargs", {})
    if kwargs is None:
        kwargs = {}
    if (
        not isinstance(kwargs, dict)
        or not all(isinstance(k, str) for k in kwargs)
        or not payload.is_json(kwargs)
    ):
        problems.append(
            _bad(
                name, "kwargs", kwargs, "expected a dict of string keys to JSON-serialisable values"
            )
        )
    if function is not None and not args_bad:
        try:
            function.check_call(list(args), dict(kwargs) if isinstance(kwargs, dict) else {})
        except jobs.BadArguments as exc:
            problems.append(_bad(name, "args", args, f"with kwargs {kwargs!r}: {exc}"))
    return args, kwargs


def _queue(name: str, raw: dict[str, Any], function: Any, problems: list[FieldProblem]) -> Any:
    """The entry's queue: its own, else its job's (checked when there is either)."""
    queue = raw.get("queue", None)
    if queue is None and function is not None:
        queue = function.options["queue"]
    if (queue is not None or function is not None) and not conf.valid_name(queue):
        problems.append(_bad(name, "queue", queue, "expected a queue name without whitespace"))
    return queue


def import_job_modules() -> None:
    """Import every installed app's ``jobs`` and ``tasks`` modules (idempotent), as the
    worker command does."""
    jobs.import_job_modules()


def load() -> list[Entry]:
    """Every entry of ``COGWORKER_PERIODIC``, validated, in configuration order."""
    raw = conf.periodic_raw()
    import_job_modules()
    return [parse_entry(name, value) for name, value in raw.items()]


def by_name(name: str) -> Entry:
    """The configured entry called ``name``; KeyError when there is none."""
    for entry in load():
        if entry.name == name:
            return entry
    raise KeyError(f"no periodic entry named {name!r} in COGWORKER_PERIODIC")


def check_messages() -> list[Any]:
    """For the system check: every bad entry, each as one Error."""
    from django.core import checks

    try:
        raw = conf.periodic_raw()
        import_job_modules()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="cogworker.E101")]
    except jobs.JobModuleError:
        return []  # cogworker.E006 names it; an entry can't be judged without its job
    found = []
    for name, value in raw.items():
        try:
            parse_entry(name, value)
        except ImproperlyConfigured as exc:
            found.append(checks.Error(str(exc), id="cogworker.E101"))
    return found
