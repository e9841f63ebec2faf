-- Open a block on a batch: create the batch (mode "create") or reopen one that has not
-- succeeded yet (mode "reopen"). While a block is open the batch's callbacks wait; the
-- block ends with lua/batch_update.lua's "close" (idempotent per token).
-- KEYS[1] = P:batch:<bid> (hash), KEYS[2] = P:batches (zset)
-- ARGV[1] = bid, ARGV[2] = "create" or "reopen", ARGV[3] = block token, ARGV[4] = now,
-- ARGV[5] = TTL of an unfinished batch (seconds), ARGV[6] = listing entries last active
-- before this epoch are dropped (their batches have expired: create only),
-- ARGV[7...] = field, value pairs of a new batch (create only; built in Python, rule 3)
-- Returns "ok", or "exists" (create: the id is taken), "gone" (reopen: no such batch) or
-- "finished" (reopen: on_success has fired, nothing may join). Types are checked before
-- any write, so a refusal writes nothing.
local function kind(key)
  return redis.call("TYPE", key)["ok"]
end
local t1, t2 = kind(KEYS[1]), kind(KEYS[2])
if (t1 ~= "none" and t1 ~= "hash") or (t2 ~= "none" and t2 ~= "zset") then
  return redis.error_reply("WRONGTYPE a batch key holds the wrong kind of value")
end
local block = "block:" .. ARGV[3]
if ARGV[2] == "create" then
  if t1 ~= "none" then
    return "exists"
  end
  for i = 7, #ARGV, 2 do
    redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1])
  end
  redis.call("HSET", KEYS[1], "created_at", ARGV[4], "updated_at", ARGV[4], "blocks", 1, block, 1)
  redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[6])
else
  if t1 == "none" then
    return "gone"
  end
  if redis.call("HEXISTS", KEYS[1], "success_at") == 1 then
    return "finished"
  end
  if redis.call("HSETNX", KEYS[1], block, 1) == 1 then
    redis.call("HINCRBY", KEYS[1], "blocks", 1)
  end
  redis.call("HSET", KEYS[1], "updated_at", ARGV[4])
end
redis.call("EXPIRE", KEYS[1], ARGV[5])
redis.call("ZADD", KEYS[2], ARGV[4], ARGV[1])
return "ok"
