"""The shop's models (no migrations: the test database creates their tables as Django's
test runner does for an unmigrated app)."""

import decimal
import uuid

from django.db import models
from django.utils import timezone


class OrderManager(models.Manager):
    def report(self, days: int) -> dict:
        since = timezone.now() - timezone.timedelta(days=days)
        paid = self.filter(paid_at__gte=since)
        total = paid.aggregate(total=models.Sum("total"))["total"] or decimal.Decimal("0.00")
        return {"days": days, "orders": paid.count(), "total": total}


class Order(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    email = models.CharField(max_length=200, blank=True)
    total = models.DecimalField(max_digits=10, decimal_places=2)
    charge = models.CharField(max_length=100, blank=True)
    paid_at = models.DateTimeField(null=True)

    objects = OrderManager()

    def paid(self, charge: str) -> None:
        self.charge = charge
        self.paid_at = timezone.now()
        self.save(update_fields=["charge", "paid_at"])


class Cart(models.Model):
    updated_at = models.DateTimeField(default=timezone.now)
