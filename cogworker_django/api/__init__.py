"""The operator api: read and act on what is in Redis, from the admin or a shell.

    from cogworker_django.api import DeadSet, Queue
    Queue("default").size()
    dead = DeadSet()
    for record in dead.page(0, 25): ...
    dead.retry(dead.find(jid))

Nothing here loads a whole set or list: reads are paginated, searches bounded.
"""

from .batches import Batches, BatchMember, BatchRecord
from .controls import LeaseHolder, LimitInfo, Limits, cancel
from .find import Found, find_job
from .history import History, Run
from .jobs import BulkResult, DeadSet, JobSet, Outcome, RetrySet, ScheduledSet
from .outbox import Outbox, OutboxInfo
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
from .results import KeptResult, Results
from .search import SearchPage
from .server import Persistence, RedisServer
from .stats import DayStat, Overview, Stats

__all__ = [
    "AwaitingRecovery",
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
    "KeptResult",
    "LeaseHolder",
    "LimitInfo",
    "Limits",
    "Outcome",
    "Outbox",
    "OutboxInfo",
    "OrphanedProcess",
    "Overview",
    "Persistence",
    "PeriodicEntries",
    "PeriodicEntry",
    "ProcessRecord",
    "ProcessSet",
    "Quarantine",
    "QuarantinedKey",
    "Queue",
    "QueueInfo",
    "RedisServer",
    "Results",
    "RetrySet",
    "Run",
    "ScheduledSet",
    "SearchPage",
    "Stats",
    "Workers",
    "cancel",
    "find_job",
]
