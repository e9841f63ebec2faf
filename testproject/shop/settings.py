"""The shop's settings of docs/celery.md ("After"), which the tests apply on top of the
test project's (tests/core/test_celery_conversion.py)."""

COGWORKER = {
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "QUEUES": ["default:2", "low"],
    "LIMITS": {"supplier": {"rate": 30, "per": 60}},
}
COGWORKER_PERIODIC = {
    "expire-carts": {"cron": "*/15 * * * *", "job": "shop.tasks.expire_carts"},
    "nightly-sales-report": {
        "cron": "0 3 * * *",
        "job": "shop.tasks.sales_report",
        "kwargs": {"days": 1},
    },
}
