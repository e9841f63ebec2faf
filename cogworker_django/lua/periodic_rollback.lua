-- Undo a won claim whose push failed, so the slot is not lost (and the entry not
-- wedged), in one step: as separate calls, the usual reason the push failed (Redis
-- away) skipped whatever came after the first.
-- KEYS[1] = P:periodic:last_slot:<name>, KEYS[2] = P:periodic:lock:<name>:<slot>,
-- KEYS[3] = P:periodic:running:<name>
-- ARGV[1] = slot, ARGV[2] = last_slot before the claim ("" if none),
-- ARGV[3] = jid the claim took the running lock under ("" if not until_executed)
-- last_slot goes back only if it still is this slot (a later slot may have been claimed
-- since); the running lock is dropped only if this claim still owns it (rule 8). Reads
-- use pcall: a key of the wrong type must not make an applied rollback count as failed
-- and be retried forever. Returns 1.
if redis.pcall("GET", KEYS[1]) == ARGV[1] then
  if ARGV[2] == "" then
    redis.call("DEL", KEYS[1])
  else
    redis.call("SET", KEYS[1], ARGV[2])
  end
end
redis.call("DEL", KEYS[2])
if ARGV[3] ~= "" and redis.pcall("GET", KEYS[3]) == ARGV[3] then
  redis.call("DEL", KEYS[3])
end
return 1
