-- Undo a won claim whose push failed, so the slot is not lost (and the entry not
-- wedged), in one step: as separate calls, the usual reason the push failed (Redis
-- away) skipped whatever came after the first.
-- KEYS[1] = P:periodic:last_slot:<name>, KEYS[2] = P:periodic:lock:<name>:<slot>,
-- KEYS[3] = P:periodic:running:<name>,
-- KEYS[4] = P:periodic:claims:<identity> (hash: claims not yet pushed)
-- ARGV[1] = slot, ARGV[2] = last_slot before the claim ("" if none),
-- ARGV[3] = jid the claim took the running lock under ("" if not until_executed),
-- ARGV[4] = the claim's field in KEYS[4] ("<slot>:<name>"), ARGV[5] = the claim's jid
-- A claim whose record is gone was pushed (the push removes the record in its own
-- script: it went through and only its reply was lost): nothing is undone, returns 0,
-- else the slot would fire twice. A record marked "pushing" (lua/periodic_mark.lua)
-- may have been pushed too: it is dropped and nothing undone (2): at most once. Else
-- last_slot goes back only if it still is this slot (a later slot may have been claimed
-- since); the running lock is dropped only if this claim still owns it (rule 8); the
-- record is removed; returns 1. Reads use pcall: a key of the wrong type must not make
-- an applied rollback count as failed and be retried forever (an unreadable claims
-- hash rolls back as if it had no records).
local record = redis.pcall("HGET", KEYS[4], ARGV[4])
if record == false then
  return 0
end
if type(record) == "string" then
  if record == "p " .. ARGV[5] then
    redis.call("HDEL", KEYS[4], ARGV[4])
    return 2
  end
  if string.sub(record, 1, #ARGV[5] + 3) ~= "c " .. ARGV[5] .. " " then
    return 0
  end
end
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
redis.pcall("HDEL", KEYS[4], ARGV[4])
return 1
