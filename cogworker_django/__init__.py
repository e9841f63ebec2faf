"""cogworker_django: background jobs for Django on Redis.

from cogworker_django import job

@job(queue="low", retry=5)
def send_welcome(user_id): ...

send_welcome.enqueue(42)
"""

__version__ = "0.1.0"

from .jobs import call, current_job, job  # noqa: E402

__all__ = ["__version__", "call", "current_job", "job"]
