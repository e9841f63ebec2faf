-- Keep a running job's lock after an outage: extend it if still ours, take it if it
-- lapsed, leave it if another owner holds it.
-- KEYS[1] = lock key (value = owner jid)
-- ARGV[1] = owner jid, ARGV[2] = TTL (whole seconds)
-- Returns 1 if the lock is ours now, 0 if another owner holds it.
local current = redis.call("GET", KEYS[1])
if current == ARGV[1] then
  redis.call("EXPIRE", KEYS[1], ARGV[2])
  return 1
end
if not current then
  redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[2])
  return 1
end
return 0
