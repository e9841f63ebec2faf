"""What the run layer depends on of a fetch mode, as protocols: the processor threads,
the manager and a run (worker/run.py) name these, never a strategy's class, so a new
way of handing jobs in is one more class that fits them (mypy checks each built-in
where it is built: ``FetchStrategy.source`` returns a :class:`JobSource`).

- :class:`JobSource`: hands the processor threads their jobs: reliable fetch's
  ``dispatch.Dispatcher`` (one fetch for every free thread, with the acks), basic
  fetch's ``fetch.BasicSource`` (each thread's own BRPOP). Built by the strategy
  (``FetchStrategy.source``) once per process.
- :class:`Settles`: what a run asks of the fetch strategy (``fetch.ReliableFetch``,
  ``fetch.BasicFetch``) to settle a finished job: ack it, or file it (retry, dead, the
  schedule) and ack it in one script.
- :class:`BatchFetch`: what the dispatcher asks of reliable fetch's strategy: one
  round trip that acks and fetches for several threads, the doorbells.

A job source that also feeds the event loop of ``async def`` jobs (the dispatcher) is a
:class:`FeedsLoop`: ``attach_loop``, ``hand_in`` and ``nudge`` besides, which a basic
source has not (the manager asks which it is, once, at start).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import redis

    from ..core.results import Ended
    from .aio import AsyncSide, Freed
    from .kinds import Kinds
    from .ledger import Filing, Work


@runtime_checkable
class JobSource(Protocol):
    def next(self, conn: redis.Redis) -> Work | None:
        """This thread's next job (handing in the one it finished happens through the
        ledger); None when none came (quiet, or a blocking wait that found nothing).
        Raises while Redis is away: the processor reports it and backs off."""

    def give_back(self, work: Work) -> bool:
        """A job that came after the stop began: True when the hand-over takes it (the
        thread does not run it)."""

    def start(self) -> None:
        """Start the source's own fetching (reliable fetch's feeder), if any."""

    def wake_waiting(self) -> None:
        """Wake every thread waiting for a job (quiet, stop)."""

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the source's own fetching to stop; True when a
        fetch was still out when this was called."""

    def flush(self, conn: redis.Redis) -> None:
        """Send what finished runs still owe Redis (acks, kept outcomes), at shutdown."""


@runtime_checkable
class FeedsLoop(JobSource, Protocol):
    """A job source that fetches for the event loop's slots too (the dispatcher)."""

    def attach_loop(self, aio: AsyncSide) -> None:
        """Fetch for ``aio``'s slots too (before :meth:`start`)."""

    def hand_in(self, freed: Freed) -> None:
        """The loop's slots came free (their acks wait in the ledger)."""

    def nudge(self) -> None:
        """Fetch at once (a job may wait: a limiter has room again)."""


class Settles(Protocol):
    def ack(self, conn: redis.Redis, raw: str, ended: Ended | None = None) -> None:
        """Ack a succeeded (or dropped) job, with its kept outcome."""

    def file(self, conn: redis.Redis, raw: str, filing: Filing, ended: Ended | None = None) -> None:
        """File a finished job in retry, dead or the schedule and ack it, in one script."""


class BatchFetch(Protocol):
    """What the dispatcher needs of its strategy (fetch.ReliableFetch)."""

    def fetch_many(
        self,
        conn: Any,
        acks: list[str],
        count: int,
        ends: Sequence[Any] = (),
        kinds: Kinds | None = None,
    ) -> list[Work]: ...

    def give_back(self, conn: Any, raws: list[str]) -> int: ...

    def bells(self) -> list[str]: ...

    def ring(self) -> None: ...
