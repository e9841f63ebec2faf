"""Redis restarted under an idle (in-process) worker (a private redis-server): one "unavailable" and
one "recovered" line per component, then new jobs run without restarting the worker."""

from __future__ import annotations

import re
import time
from collections import Counter

from testapp import jobs as tj

from ..helpers import wait_until

UNAVAILABLE = re.compile(r"\] cogworker_django: (.+?): Redis unavailable \(")
RECOVERED = re.compile(r"\] cogworker_django: (.+?): Redis recovered")


def _components(log: str, rx: re.Pattern) -> Counter:
    # "Heartbeat: detail" reports under the component before the first ": ".
    return Counter(m.split(": ")[0] for m in rx.findall(log))


def test_redis_restart_while_idle(redis_server, inworker, worker_log, configure, prefix):
    server = redis_server()
    configure(REDIS_URL=server.url)
    w = inworker()
    client = server.client()
    wait_until(lambda: client.scard(f"{prefix}:processes") == 1, 5, message="registered")
    server.stop()
    # Long enough for every component (processors, heartbeat, poller, subscriber) to
    # hit the outage a few times.
    time.sleep(2.5)
    server.start()
    client = server.client()
    # The worker comes back by itself: it beats again...
    wait_until(lambda: client.scard(f"{prefix}:processes") == 1, 10, message="beating again")
    # ...and runs new jobs.
    tj.record.enqueue_many([(f"after{i}",) for i in range(10)])
    wait_until(lambda: client.hlen(f"{prefix}:test:runs") == 10, 10, message="new jobs run")
    time.sleep(1.0)  # let every component get through one more round
    log = worker_log.log()
    down = _components(log, UNAVAILABLE)
    up = _components(log, RECOVERED)
    assert {"Fetch", "Heartbeat"} <= set(down), log
    assert all(n == 1 for n in down.values()), down
    assert all(n == 1 for n in up.values()), up
    assert set(down) == set(up), (down, up)
    assert "Traceback" not in log
    w.stop()
