-- File one entry of P:unsettled (a job a stopping process ran but could not file) in
-- its sorted set, only if it is still listed; adding before removing (rule 2).
-- KEYS[1] = P:unsettled, KEYS[2] = target zset (retry or dead)
-- ARGV[1] = the entry as listed, ARGV[2] = score, ARGV[3] = payload JSON
-- Returns 1 if filed, 0 if another process filed it first.
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
redis.call("LREM", KEYS[1], 1, ARGV[1])
return 1
