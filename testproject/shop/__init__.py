"""The Celery project of docs/celery.md ("A Celery project, converted"), after its
conversion: tasks.py and checkout.py are the page's code, run by
tests/core/test_celery_conversion.py with a real worker and Redis. The payment gateway and the
supplier's API are stand-ins that keep what they were asked in Redis (gateway.py,
supplier.py)."""
