"""200,000 jobs in dead: every read a page makes is bounded, whatever the set's size.

Runs on a private redis-server so its SLOWLOG (set to log every command) shows exactly
which commands a page issued: no command may read more than a page (ZRANGE spans) or
scan more than its budget (ZSCAN calls). Timings are printed, not asserted (the machine
is shared); the bounds are what keep the pages fast.
"""

import time

import pytest

from cogworker_django.admin.pagination import PER_PAGE
from cogworker_django.api import DeadSet
from cogworker_django.api.search import FIND_BUDGET, SEARCH_BUDGET
from cogworker_django.store import connection, keys

from ..admin_support import fast_passwords_fixture, url  # noqa: F401 - autouse fixture

pytestmark = pytest.mark.django_db

N = 200_000
TEMPLATE = (
    '{{"jid":"{i:024x}","func":"app.jobs.Mail","args":[{i},"x"],"kwargs":{{}},'
    '"queue":"default","retry":true,"retry_count":25,"created_at":1700000000.5,'
    '"enqueued_at":1700000000.5,"error_class":"ValueError","error_message":"boom {i}"}}'
)


def _build(client) -> None:
    pipe = client.pipeline(transaction=False)
    for start in range(0, N, 20_000):
        pipe.zadd(
            keys.dead(keys.home_of("default")),
            {TEMPLATE.format(i=i): 1_700_000_000 + i for i in range(start, start + 20_000)},
        )
    pipe.execute()


def _commands(client) -> list[list[str]]:
    """Commands logged since the last reset, oldest first, as lists of strings."""
    entries = client.slowlog_get(10_000)
    out = []
    for e in reversed(entries):
        cmd = e["command"]
        cmd = cmd.decode() if isinstance(cmd, bytes) else cmd
        out.append(cmd.split(" "))
    return [c for c in out if c[0].upper() not in ("SLOWLOG", "CONFIG")]


def _timed(client, fn):
    client.slowlog_reset()
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0, _commands(client)


def _assert_bounded(commands, *, max_zscan: int = 0):
    zscans = 0
    for c in commands:
        name = c[0].upper()
        assert (
            name not in ("ZRANGEBYSCORE", "SMEMBERS") or keys.dead(keys.home_of("default")) not in c
        ), c
        if name in ("ZRANGE", "ZREVRANGE") and c[1] == keys.dead(keys.home_of("default")):
            start, stop = int(c[2]), int(c[3])
            assert stop >= 0 and stop - start < 100, c  # one page, never 0 .. -1
        if name == "ZSCAN":
            zscans += 1
    assert zscans <= max_zscan


def test_dead_pages_stay_bounded_with_200k_jobs(redis_server, configure, admin_client, capsys):
    server = redis_server()
    configure(REDIS_URL=server.url)
    connection.reset()
    client = server.client()
    t0 = time.perf_counter()
    _build(client)
    built = time.perf_counter() - t0
    assert client.zcard(keys.dead(keys.home_of("default"))) == N
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 10_000)
    dead = DeadSet()
    timings = {"build (pipeline)": built}

    response, timings["admin page 1"], cmds = _timed(
        client, lambda: admin_client.get(url("deadjob"))
    )
    assert response.status_code == 200 and f"{N} jobs" in response.content.decode()
    _assert_bounded(cmds)

    response, timings["admin page 4000"], cmds = _timed(
        client, lambda: admin_client.get(url("deadjob"), {"p": 4000})
    )
    assert response.status_code == 200
    _assert_bounded(cmds)
    # Page 4000 shows the 4000th page of the set (offset 99,975 of 25, in the api's
    # order), not the first: every job here has the same name, so only the jids tell.
    shown = response.content.decode().replace("<wbr>", "")  # names wrap at dots
    wanted = [rec.jid for rec in dead.page(3999 * PER_PAGE, PER_PAGE)]
    first_page = [rec.jid for rec in dead.page(0, PER_PAGE)]
    assert len(wanted) == PER_PAGE and not set(wanted) & set(first_page)
    assert all(jid in shown for jid in wanted), "page 4000 lacks its own jobs"
    assert not any(jid in shown for jid in first_page), "page 4000 shows page 1's jobs"

    response, timings["admin search (no match)"], cmds = _timed(
        client, lambda: admin_client.get(url("deadjob"), {"q": "no such text"})
    )
    assert 'id="cw-search-more"' in response.content.decode()
    _assert_bounded(cmds, max_zscan=SEARCH_BUDGET)

    page, timings["api search 'boom 12345'"], cmds = _timed(
        client, lambda: dead.search("BOOM 12345")
    )
    _assert_bounded(cmds, max_zscan=SEARCH_BUDGET)
    # Any case; a page within its budget (not the whole set), continued by its cursor
    # to the end: exactly the 11 entries whose text holds "boom 12345".
    assert page.calls <= SEARCH_BUDGET and not page.complete, page
    found, cursor = list(page.records), page.cursor
    while cursor:
        more = dead.search("BOOM 12345", cursor=cursor)
        found += more.records
        cursor = more.cursor
    wanted = [12345, *range(123450, 123460)]
    assert sorted(r.jid for r in found) == sorted(f"{i:024x}" for i in wanted)
    assert all(b"boom 12345" in r.raw for r in found)

    rec = dead.page(0, 1)[0]
    found, timings["api find by jid (present)"], cmds = _timed(client, lambda: dead.find(rec.jid))
    assert found is not None and found.raw == rec.raw
    _assert_bounded(cmds, max_zscan=FIND_BUDGET)
    missing, timings["api find by jid (absent)"], cmds = _timed(client, lambda: dead.find("zz"))
    assert missing is None
    _assert_bounded(cmds, max_zscan=FIND_BUDGET)

    got, timings["api get by key"], cmds = _timed(client, lambda: dead.get(rec.key))
    assert got.raw == rec.raw and len(cmds) == 1 and cmds[0][0].upper() == "ZRANGEBYSCORE"

    response, timings["admin dashboard"], cmds = _timed(
        client, lambda: admin_client.get(url("dashboard"))
    )
    assert f'id="dead-size">{N}<' in response.content.decode()
    _assert_bounded(cmds)

    with capsys.disabled():
        print()
        for name, seconds in timings.items():
            print(f"  200k dead: {name}: {seconds * 1000:.0f} ms")
