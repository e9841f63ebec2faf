"""What a running job asks about its own cancellation (``api.cancel``)."""

from __future__ import annotations

from .errors import JobCancelled
from .runtime import cancelled

__all__ = ["cancelled", "check_cancelled"]


def check_cancelled() -> None:
    """Raise ``JobCancelled`` if the running job has been cancelled."""
    if cancelled():
        raise JobCancelled()
