-- Push a unique job and take its lock in one step, so a taken lock always has its job
-- and a failed push leaves no lock. The push goes before the SET (rule 2: a script
-- stopped by an error keeps its earlier writes, and SET cannot fail on a key's type).
-- KEYS[1] = unique lock, KEYS[2] = the queue list (or the schedule zset), KEYS[3] = P:queues
-- ARGV[1] = owner jid, ARGV[2] = lock TTL (whole seconds), ARGV[3] = payload JSON,
-- ARGV[4] = score for the schedule ("" to LPUSH on the queue), ARGV[5] = queue name
-- Returns 1 if pushed, 0 if a lock was already held (a duplicate: nothing written).
if redis.call("EXISTS", KEYS[1]) == 1 then
  return 0
end
if ARGV[4] == "" then
  redis.call("LPUSH", KEYS[2], ARGV[3])
  redis.pcall("SADD", KEYS[3], ARGV[5])
else
  redis.call("ZADD", KEYS[2], ARGV[4], ARGV[3])
end
redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[2])
return 1
