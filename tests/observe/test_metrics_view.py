"""cogworker_django.metrics.view: the deployment's metrics from Redis, parsed with
prometheus_client's own parser and checked against what was enqueued, scheduled, failed;
the bearer token; a bounded number of round trips whatever the number of queues."""

from __future__ import annotations

import time

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from testapp import jobs as tj

from cogworker_django import metrics
from cogworker_django.api import snapshot
from cogworker_django.store import keys, runtime

from ..api_support import add_to, make_job, push
from ..helpers import wait_until

# On a queue the test's worker does not read: a minute that turns during the test pushes
# a run the counters must not count.
PERIODIC = {"every-minute": {"cron": "* * * * *", "job": "testapp.jobs.noop", "queue": "elsewhere"}}


def samples(body: bytes | str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of a text exposition."""
    text = body.decode() if isinstance(body, bytes) else body
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return samples(response.content)


@pytest.fixture(autouse=True)
def fresh_quarantine_count():
    runtime.current().of(snapshot._QuarantineCounts).clear()
    yield
    runtime.current().of(snapshot._QuarantineCounts).clear()


def test_values_match_what_is_in_redis(client, r):
    now = time.time()
    for i in range(3):
        job = make_job(queue="mail")
        job["enqueued_at"] = now - 30 + i  # the oldest has waited 30 s
        push(r, job)
    push(r, make_job(queue="low"))
    r.sadd(keys.queues(), "empty")
    r.sadd(keys.paused(keys.home_of("default")), "low")
    add_to(r, "schedule", make_job(), now + 600)
    for _ in range(2):
        add_to(r, "retry", make_job(), now + 60)
    add_to(r, "dead", make_job())
    r.set(keys.stat("processed"), 41)
    r.set(keys.stat("failed"), 5)
    r.set(
        keys.quarantine_root(keys.home_of("default")) + "cogworker:x:1700000000000:0123abcd",
        "moved aside",
    )

    m = scrape(client)
    assert m[("cogworker_queue_size", (("queue", "mail"),))] == 3
    assert m[("cogworker_queue_size", (("queue", "low"),))] == 1
    assert m[("cogworker_queue_size", (("queue", "empty"),))] == 0
    assert 30 <= m[("cogworker_queue_latency_seconds", (("queue", "mail"),))] < 300
    assert m[("cogworker_queue_latency_seconds", (("queue", "empty"),))] == 0
    assert m[("cogworker_queue_paused", (("queue", "low"),))] == 1
    assert m[("cogworker_queue_paused", (("queue", "mail"),))] == 0
    assert m[("cogworker_scheduled_size", ())] == 1
    assert m[("cogworker_retry_size", ())] == 2
    assert m[("cogworker_dead_size", ())] == 1
    assert m[("cogworker_processed_total", ())] == 41
    assert m[("cogworker_failed_total", ())] == 5
    assert m[("cogworker_processes", ())] == 0
    assert m[("cogworker_busy", ())] == 0
    assert m[("cogworker_quarantined_keys", ())] == 1


def test_a_real_worker_shows_as_a_process_its_busy_thread_and_its_counts(
    client, inworker, worker_log, r, prefix
):
    w = inworker(queues=["work"], concurrency=2, periodic=PERIODIC)
    for _ in range(3):
        tj.noop.using(queue="work").enqueue()
    tj.always_fails.using(queue="work", retry=False).enqueue()
    busy = f"busy-{prefix}"  # held at its gate until the scrape saw it (testapp/jobs.py)
    tj.wait_at_gate.using(queue="work").enqueue(busy)

    seen: list = []

    def settled():
        m = scrape(client)
        seen[:] = [m]
        done = m[("cogworker_processed_total", ())] == 3 and m[("cogworker_failed_total", ())] == 1
        return m if done and m[("cogworker_busy", ())] == 1 else None

    try:
        m = wait_until(settled, 30, interval=0.2, message="counters flushed and one thread busy")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; the last scrape: {seen}\nworker log:\n{worker_log.log()}"
        ) from None
    assert m[("cogworker_processes", ())] == 1
    assert m[("cogworker_concurrency", ())] == 2
    assert m[("cogworker_dead_size", ())] == 1
    assert m[("cogworker_queue_size", (("queue", "work"),))] == 0
    entry = (("entry", "every-minute"),)
    assert m[("cogworker_periodic_enabled", entry)] == 1
    assert m[("cogworker_periodic_next_run_timestamp_seconds", entry)] > time.time()
    tj.gate(busy).set()
    wait_until(lambda: r.hget(f"{prefix}:test:runs", busy) == "1", 10, message="busy done")
    w.stop()


def test_empty_deployment(client):
    m = scrape(client)
    assert m[("cogworker_processes", ())] == 0
    assert m[("cogworker_processed_total", ())] == 0
    assert not [k for k in m if k[0] == "cogworker_queue_size"]


def test_the_token(client, configure):
    configure(METRICS_TOKEN="s3cret-token")
    missing = client.get("/metrics")
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic czNjcmV0").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-tokeN").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 403
    m = scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert ("cogworker_dead_size", ()) in m


def test_authorization_problem():
    assert metrics.authorization_problem(None, None) is None
    assert metrics.authorization_problem("Bearer x", None) is None
    assert metrics.authorization_problem(None, "t") == 401
    assert metrics.authorization_problem("Bearer ", "t") == 401
    assert metrics.authorization_problem("bearer t", "t") is None
    assert metrics.authorization_problem("Bearer tt", "t") == 403
    assert metrics.authorization_problem("Bearer é", "t") == 403


def test_only_reads(client):
    assert client.post("/metrics").status_code == 405


def test_openmetrics_when_asked(client):
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")


def test_redis_away_answers_503(client, configure):
    configure(REDIS_URL="redis://127.0.0.1:1/0")
    response = client.get("/metrics")
    assert response.status_code == 503
    assert b"Redis" in response.content


def _round_trips(monkeypatch, fn) -> int:
    """How many times ``fn`` sent something to Redis (a pipeline is one send)."""
    sent = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        sent.append(1)
        return original(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    try:
        fn()
    finally:
        monkeypatch.undo()
    return len(sent)


def test_round_trips_do_not_grow_with_the_number_of_queues(client, r, monkeypatch):
    for q in ("a", "b"):
        push(r, make_job(queue=q))
    scrape(client)  # connections and the quarantine count, once
    few = _round_trips(monkeypatch, lambda: scrape(client))
    for i in range(60):
        push(r, make_job(queue=f"q{i}"))
    many = _round_trips(monkeypatch, lambda: scrape(client))
    assert many == few
    assert 0 < few <= 8, few
