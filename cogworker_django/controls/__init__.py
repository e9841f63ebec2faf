"""Job controls: time limits, expiry, fleet-wide limiters and cancellation.

What a job and its callers use (all importable from ``cogworker_django``):
``JobTimeout``, ``JobCancelled``, ``OverLimit``, ``cancelled()``, ``check_cancelled()``
and ``limit()``. The job options (``timeout``, ``expires_in``, ``limits``) are checked
in :mod:`.options`; the worker's side (the watchdog that interrupts and abandons runs)
is ``worker/timeouts.py``; the operator's (``api.cancel``, ``api.Limits``) is
``api/controls.py``. The guarantees are in docs/controls.md.
"""

from .cancel import cancelled, check_cancelled
from .errors import JobCancelled, JobExpired, JobTimeout, OverLimit
from .limits import limit

__all__ = [
    "JobCancelled",
    "JobExpired",
    "JobTimeout",
    "OverLimit",
    "cancelled",
    "check_cancelled",
    "limit",
]
