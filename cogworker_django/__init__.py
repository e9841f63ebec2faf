"""cogworker_django: background jobs for Django on Redis.

    from cogworker_django import job

    @job(queue="low", retry=5)
    def send_welcome(user_id): ...

    send_welcome.enqueue(42)

Everything an application imports is importable from here: ``job``, ``call`` and
``current_job``; results and retry control (``JobRef``, ``JobFailed``, ``Retry``,
``Discard``); the job controls (``JobTimeout``, ``JobCancelled``, ``OverLimit``,
``cancelled``, ``check_cancelled``, ``limit``); the workflows (``Batch``, ``chain``,
``group``); the middleware bases and ``Reschedule``; the exceptions, all derived from ``CogworkerError``. The ``api``,
``testing`` and ``tasks_backend`` modules are imported by name (``from cogworker_django
import api``).
"""

__version__ = "0.1.0"

from . import _moved  # noqa: E402

_moved.install(__name__)  # the old paths of modules moved into folders (_moved.py)

from .controls import (  # noqa: E402
    JobCancelled,
    JobTimeout,
    OverLimit,
    cancelled,
    check_cancelled,
    limit,
)
from .core import enqueue_builtin, enqueue_plugins  # noqa: E402
from .core.argcodec import ArgumentGone  # noqa: E402
from .core.client import BulkPushError  # noqa: E402
from .core.jobref import JobRef  # noqa: E402
from .core.jobs import BadArguments, NotRegistered, call, current_job, job  # noqa: E402
from .core.middleware import ClientMiddleware, Reschedule, ServerMiddleware  # noqa: E402
from .core.results import JobFailed  # noqa: E402
from .core.retry import Discard, Retry  # noqa: E402
from .periodic.slots import CronError  # noqa: E402
from .store.errors import CogworkerError  # noqa: E402
from .workflows import (  # noqa: E402
    Batch,
    BatchFinished,
    BatchNotFound,
    WorkflowError,
    chain,
    group,
)

# The enqueue side's plugins, before anything can declare a job or enqueue one (the job
# core imports none of the features: core/enqueue_plugins.py).
enqueue_plugins.install_enqueue_plugins(enqueue_builtin.builtin())

__all__ = [
    "ArgumentGone",
    "BadArguments",
    "Batch",
    "BatchFinished",
    "BatchNotFound",
    "BulkPushError",
    "ClientMiddleware",
    "CogworkerError",
    "CronError",
    "Discard",
    "JobCancelled",
    "JobFailed",
    "JobRef",
    "JobTimeout",
    "NotRegistered",
    "OverLimit",
    "Reschedule",
    "Retry",
    "ServerMiddleware",
    "WorkflowError",
    "__version__",
    "call",
    "cancelled",
    "chain",
    "check_cancelled",
    "current_job",
    "group",
    "job",
    "limit",
]
