-- Relay one outbox entry (outbox.py) into its target, in the target's home: a job a
-- batch script put in P:outbox because its queue is in another hash slot. Exactly once:
-- the marker is set before the push, in the same step, and kept (with a TTL), so a
-- second relay of the same entry (a crash before its removal from the outbox, or two
-- relayers that read it at once) finds the marker and pushes nothing. The caller removes
-- the entry from the outbox only after this ran (rule 2).
-- KEYS[1] = the entry's marker (keys.relayed(id, home), a string in the target's home),
-- KEYS[2] = the target (a queue list, a priority zset or the schedule, same home)
-- ARGV[1] = the value to push (built in Python, rule 3), ARGV[2] = its score ("" for a
-- list: LPUSH; else ZADD), ARGV[3] = the marker's TTL (seconds)
-- Returns 1 if pushed, 0 if the marker was there (relayed already: nothing pushed).
local t = redis.call("TYPE", KEYS[2])["ok"]
local expected = ARGV[2] == "" and "list" or "zset"
if t ~= "none" and t ~= expected then
  return redis.error_reply("WRONGTYPE " .. KEYS[2] .. " holds the wrong kind of value")
end
if not redis.call("SET", KEYS[1], "1", "NX", "EX", ARGV[3]) then
  return 0
end
if ARGV[2] == "" then
  redis.call("LPUSH", KEYS[2], ARGV[1])
else
  redis.call("ZADD", KEYS[2], ARGV[2], ARGV[1])
end
return 1
