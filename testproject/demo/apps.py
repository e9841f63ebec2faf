from django.apps import AppConfig


class DemoConfig(AppConfig):
    """A few example jobs; `make demo` enqueues them and starts a worker."""

    name = "demo"
    verbose_name = "Cogworker demo"
    default_auto_field = "django.db.models.BigAutoField"
