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

from cogworker_django import connection, keys


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
