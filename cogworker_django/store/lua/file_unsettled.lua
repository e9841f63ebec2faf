-- File one entry of P:unsettled (a job a stopping process ran but could not file) in
-- its sorted set, only if it is still listed; adding before removing (rule 2: a ZADD
-- that fails leaves the entry listed). No LPOS (Redis 6.0.6+): basic fetch, offered for
-- older servers, hands over through this list too.
-- KEYS[1] = P:unsettled, KEYS[2] = target zset (retry, dead or schedule)
-- ARGV[1] = the entry as listed, ARGV[2] = score, ARGV[3] = payload JSON
-- Returns 1 if filed, 0 if another process filed it first.
local added = redis.call("ZADD", KEYS[2], "NX", ARGV[2], ARGV[3])
if redis.call("LREM", KEYS[1], 1, ARGV[1]) == 1 then
  return 1
end
-- Not listed any more: another process filed it. Undo only what this call added.
if added == 1 then
  redis.call("ZREM", KEYS[2], ARGV[3])
end
return 0
