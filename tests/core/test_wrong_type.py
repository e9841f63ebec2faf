"""A queue key of the wrong type: enqueue names the key and says the key guard will move
it aside; the Queues page shows that state instead of "0 active"; a periodic tick's error
names the key too."""

from __future__ import annotations

import logging
import time

import pytest
import redis
from testapp import jobs as tj

from cogworker_django.api import Queue
from cogworker_django.core import client
from cogworker_django.periodic import entries
from cogworker_django.periodic.ticker import Ticker
from cogworker_django.store import keys

from ..admin_support import fast_passwords_fixture, url  # noqa: F401 - autouse fixture

# Every test also runs on a Redis Cluster (tests/cluster_support.py).
pytestmark = [pytest.mark.cluster, pytest.mark.spread]


def test_enqueue_names_the_key_of_the_wrong_type(r):
    r.set(keys.queue("default"), "someone SET this")
    with pytest.raises(client.WrongKeyType) as info:
        tj.record.enqueue("x")
    message = str(info.value)
    assert f"{keys.queue('default')} holds a string, not a list" in message
    assert "key guard" in message and "KEYGUARD_INTERVAL" in message
    assert info.value.keys == {keys.queue("default"): ("string", "list")}
    assert isinstance(info.value, redis.ResponseError)  # what callers caught before


def test_a_scheduled_push_names_the_schedule(r):
    r.rpush(keys.schedule(keys.home_of("default")), "not a zset")
    with pytest.raises(
        client.WrongKeyType,
        match=f"{keys.schedule(keys.home_of('default'))} holds a list, not a zset",
    ):
        tj.record.enqueue_in(60, "x")


def test_other_refusals_are_left_as_they_are(r, configure):
    assert client.wrong_key_type(redis.ResponseError("OOM command not allowed"), {}) is None


@pytest.mark.django_db
def test_the_queues_page_shows_the_wrong_type(admin_client, r):
    r.sadd(keys.queues(), "mail", "fine")
    r.zadd(keys.live_queues(), {"fine": time.time()})  # a worker reads it
    r.set(keys.queue("mail"), "oops")
    [mail] = [q for q in Queue.overview() if q.name == "mail"]
    assert mail.wrong_type == {keys.queue("mail"): "string"}
    html = admin_client.get(url("queue")).content.decode()
    row = html.split('data-queue="mail"')[1].split("</tr>")[0]
    assert "wrong type" in row and "holds a string" in row and ">active<" not in row
    fine = html.split('data-queue="fine"')[1].split("</tr>")[0]
    assert ">active<" in fine


def test_a_periodic_tick_names_the_key(r, caplog):
    r.set(keys.queue("default"), "not a list")
    entry = entries.parse_entry("e", {"cron": "* * * * *", "job": "testapp.jobs.periodic_tick"})
    with caplog.at_level(logging.WARNING, logger="cogworker_django"):
        Ticker([entry]).tick(now=1_800_000_000.1)
    assert f"{keys.queue('default')} holds a string, not a list" in caplog.text
