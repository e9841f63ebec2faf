"""Filing ``P:unsettled``: one bad entry never holds up the entries behind it, nothing is
filed twice, and the script runs on the servers basic fetch is offered for."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path

from cogworker_django.core import payload
from cogworker_django.store import connection, keys
from cogworker_django.worker.ledger import Filing
from cogworker_django.worker.unsettled import file_unsettled

LUA = Path(__file__).resolve().parents[2] / "cogworker_django" / "store" / "lua"


def entry(target: str, score, token: str) -> str:
    job = payload.build("testapp.jobs.record", [token], jid=f"jid-{token}")
    return json.dumps({"target": target, "score": score, "payload": payload.encode(job)})


def dead_jobs(r) -> list[dict]:
    return [json.loads(x) for x in r.zrange(keys.dead(keys.home_of("default")), 0, -1)]


def test_entries_redis_refuses_are_buried_in_dead_and_the_rest_are_filed(r, caplog):
    r.set(
        keys.schedule(keys.home_of("default")), "a string, not a zset"
    )  # filing in the schedule: WRONGTYPE
    listed = [
        entry("schedule", time.time() + 60, "wrongtype"),
        json.dumps({"target": "retry", "score": "NaN", "payload": "{}"}),
        entry("retry", "1e400", "overflow"),  # a float that is inf
        "{not json",
        entry("retry", time.time() + 60, "good-retry"),
        entry("dead", time.time(), "good-dead"),
    ]
    r.rpush(keys.unsettled(keys.home_of("default")), *listed)
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        assert file_unsettled(connection.get_client()) == 6
    assert r.llen(keys.unsettled(keys.home_of("default"))) == 0
    (retried,) = [json.loads(x) for x in r.zrange(keys.retry(keys.home_of("default")), 0, -1)]
    assert retried["jid"] == "jid-good-retry"
    dead = dead_jobs(r)
    assert {d["jid"] for d in dead if d["func"] != payload.UNPARSEABLE} == {"jid-good-dead"}
    buried = {d["error_class"]: d for d in dead if d["func"] == payload.UNPARSEABLE}
    assert sorted(d["raw_payload"] for d in dead if d["func"] == payload.UNPARSEABLE) == sorted(
        listed[:4]
    )
    assert "WRONGTYPE" in buried["UnfileableUnsettledEntry"]["error_message"]
    assert "InvalidUnsettledEntry" in buried
    assert caplog.text.count("was filed in dead") == 4


def test_an_entry_that_cannot_be_filed_even_in_dead_is_left_and_the_others_go_on(r, caplog):
    r.set(keys.retry(keys.home_of("default")), "broken")
    r.set(keys.dead(keys.home_of("default")), "broken too")
    bad, good = entry("retry", time.time(), "bad"), entry("schedule", time.time(), "good")
    r.rpush(keys.unsettled(keys.home_of("default")), bad, good)
    with caplog.at_level(logging.ERROR, "cogworker_django"):
        assert file_unsettled(connection.get_client()) == 1
    assert r.lrange(keys.unsettled(keys.home_of("default")), 0, -1) == [bad]
    assert [
        json.loads(x)["jid"] for x in r.zrange(keys.schedule(keys.home_of("default")), 0, -1)
    ] == ["jid-good"]
    assert "can't be filed even in dead" in caplog.text


def test_an_entry_filed_by_another_process_first_is_not_filed_again(r):
    good = entry("retry", time.time() + 30, "once")
    r.rpush(keys.unsettled(keys.home_of("default")), good)
    client = connection.get_client()
    assert file_unsettled(client) == 1
    # A second process that read the same entry before the first removed it.
    filing = json.loads(good)
    from cogworker_django.worker.unsettled import _file

    assert (
        _file(client, keys.root(), good, Filing("retry", filing["score"], filing["payload"])) == 0
    )
    assert r.zcard(keys.retry(keys.home_of("default"))) == 1  # the first filing stands
    # ... and a copy already in the set is never removed by the loser.
    r.rpush(keys.unsettled(keys.home_of("default")), good)
    assert file_unsettled(client) == 1
    assert _file(client, keys.root(), good, Filing("retry", 1.0, filing["payload"])) == 0
    assert r.zcard(keys.retry(keys.home_of("default"))) == 1


def test_the_hand_over_entry_format_is_what_the_filer_reads():
    filing = Filing("retry", 123.5, '{"jid": "x"}')
    from cogworker_django.worker.unsettled import read_entry

    assert read_entry(filing.unsettled_entry()) == filing


def test_scripts_basic_fetch_runs_use_no_command_newer_than_its_servers():
    """Basic fetch is offered for Redis < 6.2 (it hands over through P:unsettled): the
    script that files those entries must not use LPOS (6.0.6), LMOVE or GETDEL (6.2)."""
    text = (LUA / "file_unsettled.lua").read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    assert not re.search(r'"(LPOS|LMOVE|BLMOVE|GETDEL|GETEX)"', code, re.I)
