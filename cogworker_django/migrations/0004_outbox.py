from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cogworker_django", "0003_limits_and_cancel"),
    ]

    operations = [
        migrations.CreateModel(
            name="OutboxEntry",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("kind", models.CharField(default="job", max_length=8)),
                ("jid", models.CharField(max_length=64)),
                ("queue", models.CharField(blank=True, default="", max_length=200)),
                ("payload", models.TextField()),
                ("run_at", models.FloatField(blank=True, null=True)),
                ("created_at", models.FloatField()),
                ("bid", models.CharField(blank=True, db_index=True, default="", max_length=64)),
            ],
            options={
                "db_table": "cogworker_django_outboxentry",
                "verbose_name": "outbox entry",
                "verbose_name_plural": "Outbox",
                "default_permissions": (),
            },
        ),
    ]
