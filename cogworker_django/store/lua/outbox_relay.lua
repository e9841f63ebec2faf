-- Relay one outbox entry into its target, in the target's home, exactly once: a job a
-- batch script put in P:outbox because its queue is in another hash slot (outbox.py),
-- or a row of the database outbox of a durable enqueue (durable/relay.py). The marker
-- is set before the push, in the same step, so a second relay of the same entry (a
-- crash before its removal from the outbox, or two relayers that read it at once) finds
-- the marker and pushes nothing. The caller removes the entry only after this ran
-- (rule 2).
-- A relay that read its entries at a known time (a pass of the database outbox) gives
-- that time and its lease: once the lease has run out on this server's clock the entry
-- is refused (rule 15): the relay may have stalled while another relayed the same entry
-- and let its marker expire (durable/relay.py, "the fence").
-- KEYS[1] = the entry's marker (keys.relayed(id, home), a string in the target's home),
-- KEYS[2] = the target (a queue list, a priority zset or the schedule, same home),
-- KEYS[3] (a unique job of the database outbox only) = its unique lock, same home
-- ARGV[1] = the value to push (built in Python, rule 3), ARGV[2] = its score ("" for a
-- list: LPUSH; else ZADD), ARGV[3] = the marker's TTL (seconds), ARGV[4] = when the
-- relay read the entry (epoch seconds, Redis's clock; "" for no lease), ARGV[5] = its
-- lease (seconds); with KEYS[3]: ARGV[6] = the lock's owner (the jid), ARGV[7] = the
-- lock's TTL (whole seconds)
-- Returns 1 if pushed, 0 if the marker was there (relayed already: nothing pushed), 2
-- if the unique lock is held by another job (a duplicate: nothing pushed; the marker is
-- set, so a second relay refuses it too), 3 if the lease has run out (nothing written).
-- Every type is checked before the first write.
--@include place
local t = redis.call("TYPE", KEYS[2])["ok"]
local expected = ARGV[2] == "" and "list" or "zset"
if t ~= "none" and t ~= expected then
  return redis.error_reply("WRONGTYPE " .. KEYS[2] .. " holds the wrong kind of value")
end
local lock = "none"
if KEYS[3] then
  lock = redis.call("TYPE", KEYS[3])["ok"]
  if lock ~= "none" and lock ~= "string" then
    return redis.error_reply("WRONGTYPE unique lock " .. KEYS[3] .. " holds a " .. lock)
  end
end
if ARGV[4] ~= "" then
  local now = redis.call("TIME")
  if tonumber(now[1]) + tonumber(now[2]) / 1000000 - tonumber(ARGV[4]) > tonumber(ARGV[5]) then
    return 3
  end
end
if not redis.call("SET", KEYS[1], "1", "NX", "EX", ARGV[3]) then
  return 0
end
if lock == "string" then
  -- As lua/unique_push.lua: never wedged, a lock that lost its TTL gets one back.
  if redis.call("TTL", KEYS[3]) == -1 then
    redis.call("EXPIRE", KEYS[3], ARGV[7])
  end
  return 2
end
place("LPUSH", KEYS[2], ARGV[1], ARGV[2], nil, nil)
if KEYS[3] then
  redis.call("SET", KEYS[3], ARGV[6], "EX", ARGV[7])
end
return 1
