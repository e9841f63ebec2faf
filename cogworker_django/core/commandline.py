"""Which management command this process runs, read from its command line: Django
gives a system check no way to know."""

from __future__ import annotations

import os
import sys


def running_management_command() -> bool:
    """manage.py / django-admin / ``python -m django``."""
    program = os.path.basename(sys.argv[0]) if sys.argv else ""
    if program in ("manage.py", "django-admin", "django-admin.py"):
        return True
    return program == "__main__.py" and os.path.basename(os.path.dirname(sys.argv[0])) == "django"


def management_command() -> str | None:
    """The name of the management command this process runs (``migrate``), or None when
    it runs none (a web server, a test runner calling the checks itself)."""
    if not running_management_command() or len(sys.argv) < 2:
        return None
    return sys.argv[1]
