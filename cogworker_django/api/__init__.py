"""The operator api: read and act on what is in Redis, from the admin or a shell.

    from cogworker_django.api import DeadSet, Queue
    Queue("default").size()
    dead = DeadSet()
    for record in dead.page(0, 25): ...
    dead.retry(dead.find(jid))

Nothing here loads a whole set or list: reads are paginated, searches bounded.
"""

from .find import Found, find_job
from .batches import BatchMember, BatchRecord, Batches
from .batches import BatchMember, BatchRecord, Batches
from .history import History, Run
from .jobs import BulkResult, DeadSet, JobSet, Outcome, RetrySet, ScheduledSet
from .periodic import PeriodicEntries, PeriodicEntry
from .processes import (
    AwaitingRecovery,
    BusyJob,
    OrphanedProcess,
    ProcessRecord,
    ProcessSet,
    Workers,
)
from .quarantine import Quarantine, QuarantinedKey
from .queues import Queue, QueueInfo
from .records import JobRecord
from .search import SearchPage
from .stats import DayStat, Overview, Stats

__all__ = [
    "AwaitingRecovery",
    "BatchMember",
    "BatchRecord",
    "Batches",
    "BatchMember",
    "BatchRecord",
    "Batches",
    "BulkResult",
    "BusyJob",
    "DayStat",
    "DeadSet",
    "Found",
    "History",
    "JobRecord",
    "JobSet",
    "Outcome",
    "OrphanedProcess",
    "Overview",
    "PeriodicEntries",
    "PeriodicEntry",
    "ProcessRecord",
    "ProcessSet",
    "Quarantine",
    "QuarantinedKey",
    "Queue",
    "QueueInfo",
    "RetrySet",
    "Run",
    "ScheduledSet",
    "SearchPage",
    "Stats",
    "Workers",
    "find_job",
]
