-- A caller of JobRef.result() about to block (core/results.py): the run's status if it
-- has ended, else the caller is registered as waiting, so that the end's write
-- (lua/include/keep_result.lua) wakes it through P:ended:<jid>.
-- KEYS[1] = P:result:<jid>
-- ARGV[1] = seconds the registration lasts at least (the caller's wait, plus a margin)
-- Returns the hash (flat field/value list) when it holds an ended run, else an empty list.
local status = redis.call("HGET", KEYS[1], "status")
if status == "succeeded" or status == "dead" or status == "cancelled" or status == "expired"
  or status == "discarded" or status == "SUCCESSFUL" or status == "FAILED" then
  return redis.call("HGETALL", KEYS[1])
end
redis.call("HINCRBY", KEYS[1], "waiting", 1)
local ttl = redis.call("TTL", KEYS[1])
if ttl < tonumber(ARGV[1]) then
  redis.call("EXPIRE", KEYS[1], ARGV[1])
end
return {}
