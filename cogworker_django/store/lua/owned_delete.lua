-- Release a lock only if its owner still holds it (rule 8).
-- KEYS[1] = lock key (value = owner jid)
-- ARGV[1] = owner jid
-- Returns 1 if deleted, 0 if the key is gone or held by another owner.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
