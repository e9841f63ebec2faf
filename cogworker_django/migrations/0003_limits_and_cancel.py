from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cogworker_django", "0002_batch"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="busyjob",
            options={
                "default_permissions": ("view", "change"),
                "managed": False,
                "verbose_name": "busy job",
                "verbose_name_plural": "Busy",
            },
        ),
        migrations.CreateModel(
            name="Limiter",
            fields=[
                (
                    "id",
                    models.AutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "verbose_name": "limiter",
                "verbose_name_plural": "Limits",
                "abstract": False,
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]
