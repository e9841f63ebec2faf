"""Periodic jobs from ``settings.COGWORKER_PERIODIC`` (docs/periodic.md).

- ``slots``: cron expressions and their slots in an entry's time zone (DST rules);
- ``entries``: parsing and validating the setting;
- ``ticker``: the worker component that claims each due slot once per fleet and pushes;
- ``claims``: a claimed slot's job kept in Redis until pushed (recovery pushes a dead
  claimer's);
- ``running_lock``: the ``until_executed`` lock, its server middleware and heartbeat hook;
- ``control``: entries, disable / enable / run now, for the admin and ``api``.
"""
