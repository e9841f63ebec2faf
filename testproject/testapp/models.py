"""Models the tests pass to jobs (tests/core/test_argument_types*.py): one with an integer
pk, one with a UUID pk. The app has no migrations: the test database creates their
tables as Django's test runner does for an unmigrated app."""

import uuid

from django.db import models


class Article(models.Model):
    title = models.CharField(max_length=200)


class Ticket(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    note = models.CharField(max_length=200, default="")
