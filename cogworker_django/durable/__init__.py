"""Durable enqueue: a transactional outbox in the application's database.

A durable enqueue writes the job as a row of :class:`entry.OutboxEntry` in the caller's
transaction (:mod:`.writer`): it commits with the caller's data and rolls back with it.
A relay (:mod:`.relay`) then moves committed rows to Redis and deletes them: the
enqueuing process right after its commit, and every worker's poller for what is left
(Redis away at the commit, the process killed after it). Each row is pushed exactly
once: a relay holds the rows it read (``SELECT ... FOR UPDATE SKIP LOCKED``; on SQLite,
which has no row locks, one relay at a time through an owner-checked Redis lock), and a
marker per jid, set in the same script as the push, makes a relay that died between its
push and its delete push nothing the second time (docs/jobs.md, "After the transaction
commits").
"""
