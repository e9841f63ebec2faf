"""django.tasks under faults, with real workers: Redis gone at the end of a run, a worker
killed mid-run, a result key of the wrong type, a signal receiver that raises, a run
handed back by TERM or SIGKILL.
"""

import signal

import pytest

pytest.importorskip("django.tasks")

from django.tasks import TaskResultStatus  # noqa: E402
from testapp import tasks as tt  # noqa: E402

from cogworker_django.store import keys  # noqa: E402

from ..helpers import wait_until  # noqa: E402
from .test_tasks_worker import finished  # noqa: E402


def test_the_final_status_lands_after_an_outage(worker, redis_server, configure):
    server = redis_server()
    configure(REDIS_URL=server.url)
    result = tt.slow_add.enqueue(1.5, 1, 2)
    w = worker(redis_url=server.url)
    wait_until(lambda: tt.slow_add.get_result(result.id).status == "RUNNING", 10, message="run")
    server.stop()  # the run ends while Redis is away
    w.wait_for_log(r"end of task \w+ kept to write later", timeout=10)
    server.start()  # empty: the deferred write rebuilds the whole result
    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
    assert len(result.worker_ids) == 1 and result.args == [1.5, 1, 2]


def identity(w):
    return w.log().split("identity=")[1].split()[0]


def test_a_run_killed_with_its_worker_counts_as_an_attempt(worker, r):
    result = tt.slow_first_run.enqueue("killed")
    first = worker()
    wait_until(lambda: tt.slow_first_run.get_result(result.id).status == "RUNNING", 10)
    # RUNNING is written before the function starts: wait for its first run's count too,
    # or the run after the kill is the "first" and sleeps its 30 s.
    wait_until(lambda: r.hget(tt.test_key("runs"), "killed") == "1", 10, message="first run")
    first.signal(signal.SIGKILL)
    first.wait(10)
    second = worker()  # recovers the orphan after ORPHAN_THRESHOLD, and runs it again
    # Recovery comes a full threshold after the second worker has booted and watched
    # (rule 13): wait for it by its log line, then for the run it leads to.
    second.wait_for_log(r"recovered 1 job\(s\) from dead process", timeout=45)
    finished(result, timeout=20)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 2
    assert result.worker_ids == [identity(first), identity(second)]
    assert result.attempts == 2 and result.errors == []


def test_a_broken_result_key_never_fails_the_task(inworker, worker_log, r):
    result = tt.record_run.enqueue("broken")
    r.delete(keys.result(result.id))
    r.set(keys.result(result.id), "not a hash")
    inworker()
    wait_until(lambda: r.hget(tt.test_key("runs"), "broken") == "1", 10, message="the run")
    worker_log.wait_for_log("WRONGTYPE")
    wait_until(lambda: not r.exists(keys.queue("default")), 5, message="the ack")
    assert (
        r.zcard(keys.retry(keys.home_of("default"))) == 0
        and r.zcard(keys.dead(keys.home_of("default"))) == 0
    )  # succeeded (rule 4)


def test_a_signal_receiver_that_raises_never_fails_the_task(inworker, worker_log):
    result = tt.grumpy.enqueue()
    inworker()
    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "fine"
    worker_log.wait_for_log(
        r"signal receiver .*_raises_for_grumpy.* raised RuntimeError: this receiver"
    )


def _status(result):
    result.refresh()
    return result.status


@pytest.mark.cluster
@pytest.mark.spread
@pytest.mark.parametrize("how", ["term", "kill"])
def test_a_run_handed_back_reads_ready_until_a_worker_takes_it(worker, r, how):
    """TERM past the shutdown timeout requeues the running task; SIGKILL leaves it to
    orphan recovery. Either way no worker runs it: its result reads READY (not RUNNING)
    until another worker takes it, and then finishes it."""
    result = tt.slow_add.enqueue(4, 1, 2)
    w = worker(settings={"SHUTDOWN_TIMEOUT": 0.5})
    wait_until(lambda: _status(result) == TaskResultStatus.RUNNING, 15, message="running")
    if how == "term":
        assert w.stop() == 0
        assert r.llen(keys.queue("default")) == 1  # handed back to its queue
        assert _status(result) == TaskResultStatus.READY
    else:
        w.kill_all()
        # Its presence expires within a few beats; the job waits for orphan recovery.
        wait_until(lambda: _status(result) == TaskResultStatus.READY, 15, message="ready")
    assert r.hget(keys.result(result.id), "status") == "RUNNING"  # as stored; read as READY
    second = worker()
    taken = [None]

    def taken_by_another():
        taken[0] = _status(result)
        return len(result.worker_ids) == 2

    wait_until(taken_by_another, 20, message="taken by another worker")
    assert taken[0] in (TaskResultStatus.RUNNING, TaskResultStatus.SUCCESSFUL)
    finished(result, timeout=20)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
    assert second.stop() == 0
