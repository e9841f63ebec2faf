"""The chaos soak: ``python -m bench.soak`` (or ``scripts/soak``).

A private ``redis-server`` (AOF on), three ``manage.py cogworker`` processes of the test
project (one with ``--processes 2``), a producer enqueuing a mix of jobs, two
every-second periodic entries, and a chaos thread that kills, stops and restarts
things at random intervals. Then it drains and checks the promises of
docs/reliability.md from Redis and from the jobs' own traces (testproject/soakapp).

Modules: ``procs`` (Redis and worker processes), ``producer``, ``chaos`` (the faults),
``monitor`` (stalls of this host or Redis, unexpected exits), ``check`` (the
invariants), ``report`` (the table), ``run`` (putting it together).
"""
