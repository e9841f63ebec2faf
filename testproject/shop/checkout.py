from django.db import transaction

from cogworker_django import chain

from .models import Order
from .tasks import charge_order, send_receipt, sync_stock


def place_order(email, total, skus):
    with transaction.atomic():
        order = Order.objects.create(email=email, total=total)
        transaction.on_commit(lambda: chain(charge_order.s(order), send_receipt.s(order)).enqueue())
    for sku in skus:
        sync_stock.apply_async((sku,), countdown=10)
    return order
