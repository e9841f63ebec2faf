from django.apps import AppConfig


class CogworkerConfig(AppConfig):
    name = "cogworker_django"
    verbose_name = "Cogworker"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks, conf  # noqa: F401 - checks registers the system checks

        # Fail at startup, naming the bad key, rather than at the first enqueue.
        conf.get()
