"""Settings of the test suite, the scripts and the benchmark: the demo's settings
(settings.py, with the same environment knobs) plus the tests' own app, testapp, and the
limiters its jobs name. Kept apart so the demo's admin shows none of the tests' fixtures.

pyproject.toml names this module for pytest; the workers and commands the tests start
inherit it (DJANGO_SETTINGS_MODULE).
"""

from .settings import *  # noqa: F403 - these settings extend the demo's
from .settings import COGWORKER, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "testapp"]

# The limiters testapp's jobs name (tests/controls/test_controls_limits.py); COGWORKER_SETTINGS_JSON
# may replace them (a test that starts a worker without one).
COGWORKER.setdefault(
    "LIMITS", {"test-pair": {"concurrency": 2}, "test-rate": {"rate": 3, "per": 2}}
)
