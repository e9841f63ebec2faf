from django.apps import AppConfig


class SoakappConfig(AppConfig):
    name = "soakapp"
    default_auto_field = "django.db.models.BigAutoField"
