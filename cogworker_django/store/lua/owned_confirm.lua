-- Confirm a periodic run's running lock once its job is pushed: the claim took the lock
-- with a short TTL (so a process that dies between the claim and the push, or a push
-- that never reached Redis, leaves it for a minute or two, not a day); now that the job
-- waits in its queue the lock gets the queued TTL. Only if it is still ours and its run
-- has not started: a start shortens it to the active TTL, and lengthening it then would
-- wedge the entry for a day if that run died.
-- KEYS[1] = P:periodic:running:<name> (value = owner jid)
-- ARGV[1] = owner jid, ARGV[2] = queued TTL (whole seconds),
-- ARGV[3] = the active TTL in milliseconds (a lock with no more than this left is a run's)
-- Returns 1 if extended, 0 if gone, another's, or already a run's.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call("PTTL", KEYS[1]) <= tonumber(ARGV[3]) then
  return 0
end
redis.call("EXPIRE", KEYS[1], ARGV[2])
return 1
