"""Django's own ``tests/tasks`` (test_tasks, test_immediate_backend, test_dummy_backend,
and their tasks module, from Django 6.1), ported to the cogworker backend with a real
worker: a worker inside the test process (worker/inprocess.py, started for every test by
conftest.py) runs each task, so the records Django's signals log on the
``django.tasks`` logger reach the tests' ``assertLogs`` as they do with Django's own
backends.

Django's text is kept as it is; each line the port changes or adds ends with a
``# port:`` comment saying why, and a line it removes is replaced by a ``# port:``
comment. A later change that breaks Django's contract for its task API (results,
statuses, errors, the ``django.tasks`` logger's records and levels) fails here.
"""
