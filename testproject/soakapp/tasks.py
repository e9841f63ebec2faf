"""django.tasks tasks of the chaos soak (Django 6.0+), traced like the jobs."""

from __future__ import annotations

import random
import time

from django.tasks import task

from . import trace


@task
def prioritised(token):
    with trace.run("task", token=token):
        time.sleep(random.uniform(0.0, 0.05))
        return token
