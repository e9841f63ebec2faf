"""The Celery project converted in docs/celery.md runs: its code (testproject/shop/, the
page's "After") with a real in-process worker and Redis. A placed order is charged once
and its receipt mailed; the gateway's outage is retried and a declined card is not; a
missing address retries in 60 s; an order deleted before its charge goes to dead at once;
the supplier limiter holds; every periodic entry validates and runs; a result is read
with Celery's words.

The shop app is installed for this module only (its models' tables made here): its
``limits=["supplier"]`` would otherwise be a limiter every other test's worker must know.
"""

from __future__ import annotations

import decimal
import importlib
import json
import sys
import time

import pytest
from django.conf import settings
from django.core import mail
from django.db import connection
from django.test import override_settings

import cogworker_django
from cogworker_django import api
from cogworker_django.core import jobs
from cogworker_django.store import keys

from ..conftest import PROJECT_LIMITS
from ..helpers import wait_until

# The page's code uses retry control and results (docs/jobs.md): without them, nothing here
# can run.
NEEDED = ("Retry", "JobRef", "JobFailed")
if not all(hasattr(cogworker_django, name) for name in NEEDED):
    pytest.skip(
        f"the converted project needs cogworker_django.{', '.join(NEEDED)}",
        allow_module_level=True,
    )

db = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def shop(django_db_setup, django_db_blocker):
    """The shop app installed, its tables made, its jobs registered; all undone after."""
    with override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, "shop"]):
        models = importlib.import_module("shop.models")
        from shop import settings as shop_settings

        # @job checks its limiters' names against the settings when it runs.
        limits = {**PROJECT_LIMITS, **shop_settings.COGWORKER["LIMITS"]}
        with override_settings(COGWORKER={**settings.COGWORKER, "LIMITS": limits}):
            importlib.import_module("shop.tasks")
        with django_db_blocker.unblock(), connection.schema_editor() as editor:
            editor.create_model(models.Order)
            editor.create_model(models.Cart)
        try:
            yield sys.modules["shop"]
        finally:
            with django_db_blocker.unblock(), connection.schema_editor() as editor:
                editor.delete_model(models.Order)
                editor.delete_model(models.Cart)
            for path in [p for p in list(jobs._known().jobs) if p.startswith("shop.")]:
                jobs._known().jobs.pop(path, None)
            for name in [m for m in sys.modules if m == "shop" or m.startswith("shop.")]:
                del sys.modules[name]


@pytest.fixture
def shop_worker(shop, inworker):
    """An in-process worker with the shop's settings (docs/celery.md, "After")."""
    from shop import settings as shop_settings

    def start(**options):
        cogworker = shop_settings.COGWORKER
        return inworker(
            settings={
                "QUEUES": cogworker["QUEUES"],
                "LIMITS": {**PROJECT_LIMITS, **cogworker["LIMITS"]},
            },
            **options,
        )

    return start


def sets(r, name) -> list[tuple[dict, float]]:
    key = getattr(keys, name)(keys.home_of("default"))
    return [(json.loads(m), s) for m, s in r.zrange(key, 0, -1, withscores=True)]


def charges(r) -> dict[str, str]:
    from shop import gateway

    return r.hgetall(gateway.key("charges"))


@db
def test_a_placed_order_is_charged_once_and_its_receipt_mailed(shop, shop_worker, r):
    from shop.checkout import place_order
    from shop.models import Order

    before = time.time()
    order = place_order("ada@example.com", decimal.Decimal("42.00"), ["sku-1"])
    after = time.time()
    shop_worker()
    wait_until(lambda: len(mail.outbox) == 1, 15, message="the receipt")
    order = Order.objects.get(pk=order.pk)
    assert order.paid_at is not None and order.charge.startswith("ch_")
    assert mail.outbox[0].to == ["ada@example.com"]
    assert f"Paid 42.00 ({order.charge})" in mail.outbox[0].body
    ((key, count),) = charges(r).items()
    assert key.endswith(":42.00") and count == "1"
    # The stock sync waits 10 s (apply_async(countdown=10)).
    ((job, score),) = sets(r, "schedule")
    assert job["func"] == "shop.tasks.sync_stock" and job["args"] == ["sku-1"]
    assert before + 10 <= score <= after + 10


@db
def test_a_declined_card_is_not_retried_and_the_gateways_outage_is(shop, shop_worker, r):
    from shop import gateway
    from shop.models import Order
    from shop.tasks import charge_order

    declined = Order.objects.create(email="c@example.com", total=decimal.Decimal("20000.00"))
    jid = charge_order.delay(declined)
    shop_worker()
    (entry,) = wait_until(lambda: [e for e, _ in sets(r, "dead")], 15, message="in dead")
    assert entry["jid"] == jid and entry["error_class"] == "shop.gateway.Declined"
    assert entry["retry_count"] == 1  # not retried: only gateway.Unavailable is
    order = Order.objects.create(email="b@example.com", total=decimal.Decimal("10.00"))
    r.set(gateway.key("outages"), 2)  # the next two calls fail
    jid = charge_order.delay(order)
    # Retried after 2 s, then 4 s (retry_in=backoff), then charged once.
    wait_until(lambda: Order.objects.get(pk=order.pk).paid_at, 30, message="paid")
    assert r.hget(gateway.key("calls"), jid) == "3"
    assert charges(r) == {f"{jid}:10.00": "1"}


@db
def test_a_missing_address_retries_in_60_seconds(shop, shop_worker, r):
    from shop.models import Order
    from shop.tasks import send_receipt

    order = Order.objects.create(email="", total=decimal.Decimal("5.00"))
    jid = send_receipt.delay("ch_x", order)
    shop_worker()
    ((entry, score),) = wait_until(lambda: sets(r, "retry"), 15, message="in retry")
    assert entry["jid"] == jid and entry["retry_count"] == 1
    assert entry["failed_at"] + 59 <= score <= entry["failed_at"] + 61
    assert mail.outbox == []


@db
def test_an_order_deleted_before_its_charge_goes_to_dead_at_once(shop, shop_worker, r):
    from shop.models import Order
    from shop.tasks import charge_order

    order = Order.objects.create(email="d@example.com", total=decimal.Decimal("1.00"))
    charge_order.delay(order)
    pk = order.pk
    order.delete()
    shop_worker()
    (entry,) = wait_until(lambda: [e for e, _ in sets(r, "dead")], 15, message="in dead")
    assert entry["error_class"] == "cogworker_django.core.argcodec.ArgumentGone"
    assert f"shop.Order with pk UUID('{pk}')" in entry["error_message"]
    assert entry["retry_count"] == 1 and sets(r, "retry") == [] and charges(r) == {}


@db
def test_the_supplier_limiter_holds(shop, shop_worker, r, prefix):
    from shop import gateway
    from shop.tasks import sync_stock

    for i in range(35):
        sync_stock.delay(f"sku-{i}")
    shop_worker()
    wait_until(lambda: r.llen(gateway.key("synced")) == 30, 15, message="30 syncs")
    # 30 starts a minute: the other 5 wait in the schedule for the window, not run.
    wait_until(lambda: len(sets(r, "schedule")) == 5, 15, message="5 put back")
    time.sleep(1.0)
    assert r.llen(gateway.key("synced")) == 30


@db
def test_every_periodic_entry_validates_and_runs(shop, shop_worker, r):
    import datetime as dt

    from django.utils import timezone
    from shop import settings as shop_settings
    from shop.models import Cart, Order

    old = Cart.objects.create(updated_at=timezone.now() - dt.timedelta(hours=3))
    fresh = Cart.objects.create()
    Order.objects.create(total=decimal.Decimal("3.50"), paid_at=timezone.now())
    Order.objects.create(total=decimal.Decimal("1.25"), paid_at=timezone.now())
    shop_worker(periodic=shop_settings.COGWORKER_PERIODIC)
    entries = api.PeriodicEntries()
    assert {e.name for e in entries.list()} == {"expire-carts", "nightly-sales-report"}
    assert entries.run_now("expire-carts")
    report = cogworker_django.JobRef(entries.run_now("nightly-sales-report"))
    assert report.get(timeout=15) == {"days": 1, "orders": 2, "total": decimal.Decimal("4.75")}
    wait_until(lambda: not Cart.objects.filter(pk=old.pk).exists(), 15, message="expired")
    assert Cart.objects.filter(pk=fresh.pk).exists()


@db
def test_a_result_is_read_with_celerys_words(shop, shop_worker, r):
    from shop.tasks import sales_report

    ref = sales_report.delay(days=7)
    assert isinstance(ref, str) and json.loads(r.lindex(keys.queue("low"), 0))["jid"] == ref
    shop_worker()
    assert ref.get(timeout=15) == {"days": 7, "orders": 0, "total": decimal.Decimal("0.00")}
    again = cogworker_django.JobRef(str(ref))
    assert again.id == ref and again.ready() and again.successful()
    assert again.state == "SUCCESS"
