"""Periodic entries stored in the database: ``PeriodicEntry``, until now a model without
a table that carried the Periodic schedule page's permissions, becomes a real table.

The model is dropped from the migration state and created again, managed (Django's
autodetector would only change its options). Dropping an unmanaged model touches no
table, and its content type and permissions stay (same app label, same model name), so
a group that had ``view_periodicentry`` or ``change_periodicentry`` keeps it; ``add``
and ``delete`` are created by the next ``migrate``, as for any new model.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cogworker_django", "0004_outbox"),
    ]

    operations = [
        migrations.DeleteModel(name="PeriodicEntry"),
        migrations.CreateModel(
            name="PeriodicEntry",
            fields=[
                (
                    "id",
                    models.AutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "name",
                    models.CharField(
                        help_text="Unique; no whitespace. Shown in the job's payload.",
                        max_length=200,
                        unique=True,
                    ),
                ),
                (
                    "cron",
                    models.CharField(
                        help_text="5 fields (minute hour day month weekday), or 6 with seconds "
                        "first; @hourly, @daily, ... too.",
                        max_length=200,
                    ),
                ),
                (
                    "job",
                    models.CharField(
                        help_text="The dotted path of a @job function.", max_length=255
                    ),
                ),
                (
                    "args",
                    models.JSONField(
                        blank=True, default=list, help_text='A JSON list, e.g. [1, "fr"].'
                    ),
                ),
                (
                    "kwargs",
                    models.JSONField(
                        blank=True, default=dict, help_text='A JSON object, e.g. {"lang": "fr"}.'
                    ),
                ),
                (
                    "queue",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="Empty: the job's own queue.",
                        max_length=200,
                    ),
                ),
                (
                    "unique",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("", "None"),
                            ("until_executed", "until_executed: runs never overlap"),
                        ],
                        default="",
                        max_length=32,
                    ),
                ),
                (
                    "timezone",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="A zoneinfo name such as Europe/Paris. Empty: settings.TIME_ZONE.",
                        max_length=64,
                    ),
                ),
                ("enabled", models.BooleanField(default=True)),
                ("description", models.TextField(blank=True, default="")),
                ("changed_at", models.DateTimeField(editable=False, null=True)),
                ("owed_slot", models.BigIntegerField(editable=False, null=True)),
            ],
            options={
                "verbose_name": "periodic entry",
                "verbose_name_plural": "Periodic schedule",
                "db_table": "cogworker_django_periodicentry",
                "ordering": ["name"],
                "default_permissions": ("add", "change", "delete", "view"),
            },
        ),
    ]
