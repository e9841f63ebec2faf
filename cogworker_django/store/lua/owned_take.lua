-- Take a lock for an owner, or confirm the owner already holds it.
-- KEYS[1] = lock key (value = owner jid)
-- ARGV[1] = owner jid, ARGV[2] = TTL (whole seconds)
-- Returns 1 if the owner holds the lock now, 0 if another owner does.
local current = redis.call("GET", KEYS[1])
if not current or current == ARGV[1] then
  redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[2])
  return 1
end
return 0
