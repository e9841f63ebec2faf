"""A queue no worker reads is not silent: `check` warns about a @job whose queue is in no
QUEUES (cogworker.W005), the Queues page says "no worker reads this queue" (api:
QueueInfo.read, from P:live_queues), and a queue left behind by a `-q` run drops off the
list once it is empty and no worker reads it."""

from __future__ import annotations

import importlib
import sys
import textwrap
import time

import pytest

from cogworker_django import checks
from cogworker_django.api import Queue
from cogworker_django.api.queues import read_window
from cogworker_django.core import jobs
from cogworker_django.store import keys

from ..admin_support import fast_passwords_fixture, url  # noqa: F401 - autouse fixture
from ..api_support import make_job, push
from ..helpers import wait_until

MISROUTED = textwrap.dedent(
    """
    from cogworker_django import job


    @job(queue="critcal")
    def charge(order_id):
        pass
    """
)


@pytest.fixture
def misrouted(tmp_path):
    (tmp_path / "cw_misrouted.py").write_text(MISROUTED)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("cw_misrouted")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("cw_misrouted", None)
        jobs._known().jobs.pop("cw_misrouted.charge", None)


def test_check_warns_about_a_job_whose_queue_no_worker_reads(misrouted, configure):
    configure(QUEUES=["default", "critical"])
    (found,) = checks.check_job_queues()
    assert found.id == "cogworker.W005" and found.obj == "cw_misrouted.charge"
    assert "queue 'critcal', which is not in COGWORKER['QUEUES']" in found.msg
    assert "Did you mean 'critical'?" in found.msg
    assert "-q critcal" in found.hint
    configure(QUEUES=["default", "critcal"])
    assert checks.check_job_queues() == []


def test_the_test_projects_jobs_pass():
    assert checks.check_job_queues() == []


def _overview() -> dict:
    """The admin's list: without the queues left behind."""
    return {q.name: q for q in Queue.overview(left_behind=False)}


@pytest.mark.django_db
def test_queues_page_says_which_queue_no_worker_reads(inworker, r, configure, admin_client):
    configure(HEARTBEAT_INTERVAL=0.5)  # the workers' (FAST_SETTINGS): read_window() = 2 s
    push(r, make_job(queue="critcal"))
    w = inworker(queues=["default", "onerun"])
    wait_until(lambda: "onerun" in _overview(), 10, message="onerun listed")
    infos = _overview()
    assert infos["onerun"].read and infos["default"].read
    assert not infos["critcal"].read and infos["critcal"].size == 1
    html = admin_client.get(url("queue")).content.decode()
    row = html.split('data-queue="critcal"')[1].split("</tr>")[0]
    assert "no worker reads this queue" in row
    assert (
        "no worker reads this queue" not in html.split('data-queue="onerun"')[1].split("</tr>")[0]
    )
    w.stop()
    # The -q run's queue, empty and unread, drops off; a queue with jobs, or a configured
    # one, stays (marked unread).
    wait_until(lambda: "onerun" not in _overview(), 3 * read_window(), message="onerun gone")
    infos = _overview()
    assert not infos["critcal"].read and not infos["default"].read
    assert r.sismember(keys.queues(), "onerun")  # only left out of the list, never unlisted
    assert "onerun" in {q.name for q in Queue.overview()}  # (metrics still export it)


def test_a_queue_stays_read_between_beats_at_the_default_heartbeat(inworker, r):
    """At the production HEARTBEAT_INTERVAL (5 s) a running worker's queue reads as read
    through several beats, and drops off within the window once it stops."""
    w = inworker(settings={"HEARTBEAT_INTERVAL": 5.0}, queues=["onerun"])
    wait_until(lambda: "onerun" in _overview(), 15, message="onerun listed")
    deadline = time.monotonic() + 3 * 5.0  # three beats
    while time.monotonic() < deadline:
        assert _overview()["onerun"].read
        time.sleep(0.5)
    w.stop()
    wait_until(lambda: "onerun" not in _overview(), 3 * read_window(), message="onerun gone")
