from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cogworker_django", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Batch",
            fields=[
                (
                    "id",
                    models.AutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "verbose_name": "batch",
                "verbose_name_plural": "Batches",
                "abstract": False,
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]
