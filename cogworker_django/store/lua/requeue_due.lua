-- Move one due job from a sorted set (schedule or retry) to its queue: only if it is
-- still there (another poller may have moved it), and adding before removing (rule 2).
-- The new payload (re-stamped enqueued_at) is built in Python (rule 3).
-- KEYS[1] = source zset, KEYS[2] = target (queue list, or the dead zset),
-- KEYS[3] = P:queues (left out with a home per queue: another slot; the push listed it)
-- ARGV[1] = raw member, ARGV[2] = new payload JSON, ARGV[3] = queue name,
-- ARGV[4] = score when the target is a zset ("" to LPUSH on a list)
-- Returns 1 if moved, 0 if the member was gone.
--@include place
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
place("LPUSH", KEYS[2], ARGV[2], ARGV[4], KEYS[3], ARGV[3])
redis.call("ZREM", KEYS[1], ARGV[1])
return 1
