import datetime as dt

from django.core.mail import send_mail
from django.utils import timezone

from cogworker_django import Retry, current_job, job

from . import gateway, supplier
from .models import Cart, Order


def backoff(attempt, exc):
    return min(2**attempt, 600)


@job(retry=5, retry_on=(gateway.Unavailable,), retry_in=backoff)
def charge_order(order):
    charge = gateway.charge(order.total, idempotency_key=current_job()["jid"])
    order.paid(charge)
    return charge


@job(retry=3)
def send_receipt(charge, order):
    if not order.email:
        raise Retry(in_=60)
    send_mail("Your receipt", f"Paid {order.total} ({charge})", None, [order.email])


@job(limits=["supplier"], timeout=30)
def sync_stock(sku):
    supplier.sync(sku)


@job(result_ttl=0)
def expire_carts():
    Cart.objects.filter(updated_at__lt=timezone.now() - dt.timedelta(hours=2)).delete()


@job(queue="low")
def sales_report(days=1):
    return Order.objects.report(days)
