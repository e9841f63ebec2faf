"""The outbox's table: one row per durably enqueued job (or batch block to close)."""

from __future__ import annotations

from django.db import models

JOB = "job"
# A ``with batch:`` block whose members are durable: closed by the relay once none of its
# batch's job rows is left (workflows/batch.py).
CLOSE = "close"
# The table's name (Django's default for the model, spelled out for the relay's check).
TABLE = "cogworker_django_outboxentry"


class OutboxEntry(models.Model):
    """A job written in its enqueuer's transaction, on its way to Redis.

    ``payload`` is the job's payload text as a push would write it (its ``at`` for a
    scheduled one: ``run_at`` repeats it for people reading the table); ``created_at``
    (epoch seconds) is when it was written, for the outbox's age. The relay takes rows
    oldest first (by ``id``). ``bid``: the batch a member (or a block to close) belongs
    to."""

    id: models.BigAutoField[int, int] = models.BigAutoField(primary_key=True)
    kind: models.CharField[str, str] = models.CharField(max_length=8, default=JOB)
    jid: models.CharField[str, str] = models.CharField(max_length=64)
    queue: models.CharField[str, str] = models.CharField(max_length=200, blank=True, default="")
    payload: models.TextField[str, str] = models.TextField()
    run_at: models.FloatField[float | None, float | None] = models.FloatField(null=True, blank=True)
    created_at: models.FloatField[float, float] = models.FloatField()
    bid: models.CharField[str, str] = models.CharField(
        max_length=64, blank=True, default="", db_index=True
    )

    class Meta:
        db_table = TABLE
        verbose_name = "outbox entry"
        verbose_name_plural = "Outbox"
        default_permissions = ()  # not an admin page: the dashboard shows its size

    def __str__(self) -> str:
        return f"{self.kind} {self.jid} ({self.queue})"
