#!/usr/bin/env python
"""Django's command-line utility for the cogworker_django test project."""

import os
import sys
from pathlib import Path


def main() -> None:
    # The repository root goes last on sys.path, so the project also runs from a checkout
    # where cogworker_django is not installed (an installed copy still wins).
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
