-- Push a unique job and take its lock in one step, so a taken lock always has its job
-- and a failed push leaves no lock. The push goes before the SET (rule 2: a script
-- stopped by an error keeps its earlier writes, and SET cannot fail on a key's type).
-- KEYS[1] = unique lock, KEYS[2] = the queue list (or the schedule or a priority zset),
-- KEYS[3] = P:queues
-- ARGV[1] = owner jid, ARGV[2] = lock TTL (whole seconds), ARGV[3] = payload JSON,
-- ARGV[4] = score for a zset target: the schedule, or a priority zset ("" to LPUSH on
-- the queue list), ARGV[5] = queue name
-- Returns 1 if pushed, 0 if a lock was already held (a duplicate: nothing written).
-- A lock key of another type is an error (refusing every push for ever would hide it).
local kind = redis.call("TYPE", KEYS[1]).ok
if kind == "string" then
  -- Never wedged: a lock that lost its TTL (PERSIST, a hand-made SET) gets one back.
  if redis.call("TTL", KEYS[1]) == -1 then
    redis.call("EXPIRE", KEYS[1], ARGV[2])
  end
  return 0
elseif kind ~= "none" then
  return redis.error_reply("WRONGTYPE unique lock " .. KEYS[1] .. " holds a " .. kind)
end
if ARGV[4] == "" then
  redis.call("LPUSH", KEYS[2], ARGV[3])
  redis.pcall("SADD", KEYS[3], ARGV[5])
else
  redis.call("ZADD", KEYS[2], ARGV[4], ARGV[3])
end
redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[2])
return 1
