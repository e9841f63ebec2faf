-- Extend a lock only if its owner still holds it (rule 8).
-- KEYS[1] = lock key (value = owner jid)
-- ARGV[1] = owner jid, ARGV[2] = TTL (whole seconds)
-- Returns 1 if extended, 0 if the key is gone or held by another owner.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("EXPIRE", KEYS[1], ARGV[2])
end
return 0
