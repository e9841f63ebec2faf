-- File one entry of P:unsettled (a job a stopping process ran but could not file) in
-- its sorted set, only if it is still listed; adding before removing (rule 2: a ZADD
-- that fails leaves the entry listed). No LPOS (Redis 6.0.6+): basic fetch, offered for
-- older servers, hands over through this list too.
-- A filing in dead whose job has an on_dead job pushes it in the same step (retry
-- control: exactly once, as lua/settle.lua does).
-- KEYS[1] = P:unsettled, KEYS[2] = target zset (retry, dead or schedule), then for an
-- on_dead job its target (its queue's list or the schedule) and maybe P:queues
-- ARGV[1] = the entry as listed, ARGV[2] = score, ARGV[3] = payload JSON, then for an
-- on_dead job: "1", its payload, score ("" onto the list) and queue name
-- Returns 1 if filed, 0 if another process filed it first.
--@include place
local added = redis.call("ZADD", KEYS[2], "NX", ARGV[2], ARGV[3])
if redis.call("LREM", KEYS[1], 1, ARGV[1]) == 1 then
  if ARGV[4] == "1" then
    place("LPUSH", KEYS[3], ARGV[5], ARGV[6], KEYS[4], ARGV[7])
  end
  return 1
end
-- Not listed any more: another process filed it. Undo only what this call added.
if added == 1 then
  redis.call("ZREM", KEYS[2], ARGV[3])
end
return 0
