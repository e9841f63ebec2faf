-- Push a unique job and take its lock in one step, so a taken lock always has its job
-- and a failed push leaves no lock. The push goes before the SET (rule 2: a script
-- stopped by an error keeps its earlier writes, and SET cannot fail on a key's type).
-- KEYS[1] = unique lock, KEYS[2] = the queue list (or the schedule or a priority zset),
-- KEYS[3] = P:queues, KEYS[4] (only for a claimed periodic slot's job) =
-- P:periodic:claims:<identity>; with a home per queue only KEYS[1..2] (the others are in
-- another slot: unique.py lists the queue, periodic/claims.py marks the claim first)
-- ARGV[1] = owner jid, ARGV[2] = lock TTL (whole seconds), ARGV[3] = payload JSON,
-- ARGV[4] = score for a zset target: the schedule, or a priority zset ("" to LPUSH on
-- the queue list), ARGV[5] = queue name; with KEYS[4]: ARGV[6] = the claim's field
-- ("<slot>:<name>"), ARGV[7] = the claim's jid
-- Returns 1 if pushed (2 if pushed onto a queue list that was empty: the caller rings
-- its doorbell, store/bell.py), 0 if a lock was already held (a duplicate: nothing
-- written).
-- A lock key of another type is an error (refusing every push for ever would hide it).
-- With KEYS[4] (lua/periodic_push.lua says why): nothing is written unless the claim's
-- record is still there (-1 otherwise), and the record is removed with the push, or
-- with the refusal of a duplicate (the slot is used up either way). A claims hash of
-- the wrong type is passed over (the push goes on as without a record).
--@include place
local claimed = false
if KEYS[4] then
  local record = redis.pcall("HGET", KEYS[4], ARGV[6])
  if type(record) ~= "table" then
    if not record or string.sub(record, 1, #ARGV[7] + 3) ~= "c " .. ARGV[7] .. " " then
      return -1
    end
    claimed = true
  end
end
local kind = redis.call("TYPE", KEYS[1]).ok
if kind == "string" then
  -- Never wedged: a lock that lost its TTL (PERSIST, a hand-made SET) gets one back.
  if redis.call("TTL", KEYS[1]) == -1 then
    redis.call("EXPIRE", KEYS[1], ARGV[2])
  end
  if claimed then
    redis.call("HDEL", KEYS[4], ARGV[6])
  end
  return 0
elseif kind ~= "none" then
  return redis.error_reply("WRONGTYPE unique lock " .. KEYS[1] .. " holds a " .. kind)
end
local length = place("LPUSH", KEYS[2], ARGV[3], ARGV[4], KEYS[3], ARGV[5])
-- The record goes after the push (rule 2: a push stopped by an error keeps the record).
if claimed then
  redis.call("HDEL", KEYS[4], ARGV[6])
end
redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[2])
if length == 1 then
  return 2
end
return 1
