"""Periodic jobs from ``settings.COGWORKER_PERIODIC`` and the database (docs/periodic.md).

- ``slots``: cron expressions and their slots in an entry's time zone (DST rules);
- ``entries``: parsing and validating the setting (and a database row, the same way);
- ``stored``: the ``PeriodicEntry`` model edited in the admin, and the version key a
  save or delete bumps;
- ``source``: the database's entries as one worker knows them (read on a thread of
  their own when the version key moves), beside the settings';
- ``ticker``: the worker component that claims each due slot once per fleet and pushes;
- ``claims``: a claimed slot's job kept in Redis until pushed (recovery pushes a dead
  claimer's);
- ``running_lock``: the ``until_executed`` lock, its server middleware and heartbeat hook;
- ``control``: entries, disable / enable / run now, for the admin and ``api``.
"""
