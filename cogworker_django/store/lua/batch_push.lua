-- Push jobs that join a batch and count them in it, in one step: a member is counted
-- exactly when it is pushed, never one without the other. Every key's type is checked
-- before the first write (and an OOM refusal comes at the first write), so the script
-- writes all of it or nothing.
-- KEYS[1] = P:batch:<bid> (hash), KEYS[2] = its pending set, KEYS[3] = its waiting set,
-- KEYS[4] = its jids list, KEYS[5] = P:queues, KEYS[6] = P:batches,
-- KEYS[7...] = where the jobs go (queue lists, P:schedule, priority zsets), their
-- queues' doorbells (P:bell:<q>) and the relay markers
-- ARGV[1] = bid, ARGV[2] = now, ARGV[3] = TTL of an unfinished batch (seconds),
-- ARGV[4] = when the relay of durable members read them (epoch seconds, Redis's clock;
-- "" for none), ARGV[5] = its lease (seconds): once run out on this server's clock,
-- nothing is pushed (a relay that stalled: lua/outbox_relay.lua, rule 15),
-- then seven per job: index of its target in KEYS, the payload (encoded in Python, rule 3;
-- for a priority zset the member priority.py built), the score ("" for a list: LPUSH),
-- the jid, the queue to list in P:queues ("" for none), the index in KEYS of its relay
-- marker ("0" for none; a durable member relayed from the database outbox,
-- durable/relay.py: set NX with the push, TTL ARGV[3]; a job whose marker is there was
-- pushed and counted by an earlier relay: skipped), the index in KEYS of its queue's
-- doorbell ("0" for none: rung when the push found the list empty, store/bell.py, as
-- an ordinary push rings it)
-- Returns the number of jobs pushed, or "gone" (no such batch) / "finished" (on_success
-- has fired) / "stale" (the relay's lease ran out): then nothing is pushed.
--@include place
local function kind(key)
  return redis.call("TYPE", key)["ok"]
end
-- (P:queues is only a listing: a broken one never stops a push, rule 1.)
local want = {"hash", "set", "set", "list", "", "zset"}
for i = 1, 6 do
  local t = kind(KEYS[i])
  if want[i] ~= "" and t ~= "none" and t ~= want[i] then
    return redis.error_reply("WRONGTYPE " .. KEYS[i] .. " holds the wrong kind of value")
  end
end
for i = 6, #ARGV, 7 do
  local key = KEYS[tonumber(ARGV[i])]
  local t = kind(key)
  local expected = ARGV[i + 2] == "" and "list" or "zset"
  if t ~= "none" and t ~= expected then
    return redis.error_reply("WRONGTYPE " .. key .. " holds the wrong kind of value")
  end
end
if ARGV[4] ~= "" then
  local now = redis.call("TIME")
  if tonumber(now[1]) + tonumber(now[2]) / 1000000 - tonumber(ARGV[4]) > tonumber(ARGV[5]) then
    return "stale"
  end
end
if redis.call("EXISTS", KEYS[1]) == 0 then
  return "gone"
end
if redis.call("HEXISTS", KEYS[1], "success_at") == 1 then
  return "finished"
end
local pushed = 0
for i = 6, #ARGV, 7 do
  local key, value, score, jid, queue =
    KEYS[tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local marker, bell = tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  -- A durable member whose marker is there was pushed and counted by an earlier relay.
  if marker == 0 or redis.call("SET", KEYS[marker], "1", "NX", "EX", ARGV[3]) then
    place("LPUSH", key, value, score, nil, nil, bell > 0 and KEYS[bell] or nil)
    if redis.call("SADD", KEYS[2], jid) == 1 then
      redis.call("SADD", KEYS[3], jid)
      redis.call("RPUSH", KEYS[4], jid)
      redis.call("HINCRBY", KEYS[1], "total", 1)
    end
    if queue ~= "" then
      redis.pcall("SADD", KEYS[5], queue)
    end
    pushed = pushed + 1
  end
end
redis.call("HSET", KEYS[1], "updated_at", ARGV[2])
for i = 1, 4 do
  redis.call("EXPIRE", KEYS[i], ARGV[3])
end
redis.call("ZADD", KEYS[6], ARGV[2], ARGV[1])
return pushed
