"""A router for the tests: ``cogworker_django.PeriodicEntry`` on the database alias that
``TESTPROJECT_PERIODIC_DB`` names (settings.py installs it only when that is set)."""

import os

LABEL = "cogworker_django.periodicentry"


class PeriodicEntriesRouter:
    def _alias(self, model):
        if model._meta.label_lower == LABEL:
            return os.environ.get("TESTPROJECT_PERIODIC_DB") or None
        return None

    def db_for_read(self, model, **hints):
        return self._alias(model)

    def db_for_write(self, model, **hints):
        return self._alias(model)
