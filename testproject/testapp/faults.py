"""Faults a test turns on from Redis, inside real worker processes.

``KillOnPeriodicPush`` is a client middleware: when a periodic run is pushed while
``<prefix>:test:kill_on_periodic_push`` is set, the process that pushes it takes the
flag (GETDEL: one process per setting), appends the slot to
``<prefix>:test:killed_slots`` and SIGKILLs itself before the push, so the slot is
claimed in Redis and its job never exists: a worker killed between claim and push.
``HangOnPeriodicPush`` is a client middleware that hangs periodic pushes while a key
says so.
"""

import os
import signal
import time

from cogworker_django.store import connection, keys


def kill_flag_key() -> str:
    return f"{keys.prefix()}:test:kill_on_periodic_push"


def killed_slots_key() -> str:
    return f"{keys.prefix()}:test:killed_slots"


class KillOnPeriodicPush:
    def __call__(self, job, push):
        if job.get("periodic_slot") is not None:
            conn = connection.get_client()
            if conn.getdel(kill_flag_key()):
                conn.rpush(killed_slots_key(), f"{job['periodic_slot']} {os.getpid()}")
                os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(10)
        return push(job)


def hang_key() -> str:
    return f"{keys.prefix()}:test:hang_periodic_push"


def hung_key() -> str:
    return f"{keys.prefix()}:test:hung_pushes"


class HangOnPeriodicPush:
    """A client middleware that hangs: while ``<prefix>:test:hang_periodic_push`` holds a
    number of seconds, every periodic run's push first appends its slot to
    ``<prefix>:test:hung_pushes``, then sleeps that long (user code that hangs)."""

    def __call__(self, job, push):
        if job.get("periodic_slot") is not None:
            conn = connection.get_client()
            seconds = conn.get(hang_key())
            if seconds:
                conn.rpush(hung_key(), str(job["periodic_slot"]))
                time.sleep(float(seconds))
        return push(job)


def kill_after_filing_key() -> str:
    return f"{keys.prefix()}:test:kill_after_filing_a_waiting_job"


class KillAfterFilingAWaitingJob:
    """A server middleware that does nothing to runs; made (at the worker's boot), it
    wraps the limiters' ``park`` so that, while ``<prefix>:test:kill_after_filing_a_
    waiting_job`` is set, the process that has just filed a refused job in the schedule
    takes the flag and SIGKILLs itself before its second index write: a worker killed
    between a refused job's filing and ``park(..., done=True)``."""

    def __init__(self):
        from cogworker_django.controls import limits

        real = limits.park

        def park(name, filed, done=True):
            if done and connection.get_client().getdel(kill_after_filing_key()):
                os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(10)
            return real(name, filed, done)

        limits.park = park

    def __call__(self, job, queue, run):
        return run()
