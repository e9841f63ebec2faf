-- Move one due job from a sorted set (schedule or retry) to its queue: only if it is
-- still there (another poller may have moved it), and adding before removing (rule 2).
-- The new payload (re-stamped enqueued_at) is built in Python (rule 3).
-- KEYS[1] = source zset, KEYS[2] = target (queue list, or the dead zset),
-- KEYS[3] = P:queues (left out with a home per queue: another slot; the push listed it),
-- then optionally the queue's doorbell P:bell:<q> (store/bell.py), at the index ARGV[5]
-- ARGV[1] = raw member, ARGV[2] = new payload JSON, ARGV[3] = queue name,
-- ARGV[4] = score when the target is a zset ("" to LPUSH on a list),
-- ARGV[5] (optional) = the index in KEYS of the doorbell, rung if the list was empty
-- Returns 1 if moved, 0 if the member was gone.
--@include place
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
local bell_at = tonumber(ARGV[5]) or 0
local bell = bell_at > 0 and KEYS[bell_at] or nil
local listing = bell_at ~= 3 and KEYS[3] or nil -- (KEYS[3] is the bell when no listing)
place("LPUSH", KEYS[2], ARGV[2], ARGV[4], listing, ARGV[3], bell)
redis.call("ZREM", KEYS[1], ARGV[1])
return 1
