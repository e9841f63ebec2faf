"""A module no worker may import because a payload names it (resolve.py): importing it
leaves a mark in Redis (``<prefix>:test:imported``) that the tests look for."""

from django.tasks import task

from cogworker_django.store import connection, keys

connection.get_client().set(f"{keys.prefix()}:test:imported", "yes")


@task
def sneaky(token):
    connection.get_client().hincrby(f"{keys.prefix()}:test:runs", token, 1)
