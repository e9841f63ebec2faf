"""The job core: what an application calls and what every push and every run share.
The payload and its codec rules, ``@job`` and the registry, the client's pushes, the
middleware chains, unique locks, priorities, departures, and the run context a job
reads (``taskcontext``)."""
