"""The protocols the run layer names instead of a fetch mode's classes
(worker/jobsource.py): each mode's job source fits them, and the processors, the run
and the event loop's side are typed by them (mypy checks the rest)."""

import pytest

from cogworker_django.conf import QueueSpec
from cogworker_django.worker import aio_side, fetch, processor, run
from cogworker_django.worker.jobsource import FeedsLoop, JobSource
from cogworker_django.worker.ledger import Control, Ledger


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_each_fetch_mode_builds_a_job_source(mode, configure):
    strategy = fetch.for_mode(mode, "host:1", (QueueSpec("default", 1),))
    source = strategy.source(Ledger(), Control(1.0), 2)
    assert isinstance(source, JobSource)
    # Only reliable fetch's dispatcher fetches for the event loop's slots too.
    assert isinstance(source, FeedsLoop) == (mode == "reliable")
    assert callable(strategy.ack) and callable(strategy.file)


def test_the_run_path_names_the_protocols_not_any():
    # (annotations as written: the modules use postponed evaluation)
    hints = processor.Processor.__init__.__annotations__
    assert (hints["source"], hints["strategy"]) == ("JobSource", "Settles")
    assert run.Driver.__annotations__["strategy"] == "Settles"
    side = aio_side.Side.__annotations__
    assert (side["strategy"], side["watchdog"], side["chain"]) == (
        "Settles",
        "Watchdog",
        "RunChain",
    )
