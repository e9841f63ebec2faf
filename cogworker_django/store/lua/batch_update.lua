-- The bookkeeping of one outcome in a batch, and its callbacks, in one step. Idempotent:
-- a member's outcome counts only while the member is pending (a second delivery of the
-- same jid finds it gone and changes nothing), a block closes once per token, and each
-- callback is pushed once (its *_at field says it was). The pushes come before the
-- removals that make them due (rule 2); every type is checked before the first write.
-- KEYS[1] = P:batch:<bid> (hash), KEYS[2] = its pending set, KEYS[3] = its waiting set,
-- KEYS[4] = its failed hash, KEYS[5] = its results hash, KEYS[6] = its jids list,
-- KEYS[7] = P:batches, KEYS[8] = P:queues, KEYS[9] = on_complete's queue,
-- KEYS[10] = on_success's queue, KEYS[11] = the next chain step's queue
-- ARGV[1] = bid, ARGV[2] = op: "success" / "failure" (a member's run ended) or "close"
-- (a block ended), ARGV[3] = the member's jid (for close: the block token), ARGV[4] = now,
-- ARGV[5] = TTL of an unfinished batch, ARGV[6] = TTL once on_success has fired,
-- ARGV[7] = success: the return value as JSON text to keep ("" keep none);
--           failure: the failure's JSON (error, whether the job went to dead),
-- ARGV[8..10] = on_complete's payload, jid, queue name ("" when there is no callback),
-- ARGV[11..13] = on_success's payload, jid, queue name,
-- ARGV[14..16] = the next chain step's payload, jid, queue name (success only; "" none),
-- ARGV[17] = that step's number
-- Payloads are built in Python (rule 3). Returns {status, complete jid, success jid}:
-- status "done", "seen" (already counted: nothing changed) or "gone" (no such batch);
-- a jid when this call pushed that callback, else "".
--@include place
local function kind(key)
  return redis.call("TYPE", key)["ok"]
end
-- A queue is checked only when something goes to it; P:queues is only a listing (a
-- broken one never stops a push, rule 1). Unused queue KEYS may name any key.
local want = {"hash", "set", "set", "hash", "hash", "list", "zset", "", "list", "list", "list"}
local used = {[9] = ARGV[8] ~= "", [10] = ARGV[11] ~= "", [11] = ARGV[14] ~= ""}
for i = 1, 11 do
  if want[i] ~= "" and (i < 9 or used[i]) then
    local t = kind(KEYS[i])
    if t ~= "none" and t ~= want[i] then
      return redis.error_reply("WRONGTYPE " .. KEYS[i] .. " holds the wrong kind of value")
    end
  end
end
local batch, op, id, now = KEYS[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call("EXISTS", batch) == 0 then
  return {"gone", "", ""}
end

if op == "success" then
  if redis.call("SISMEMBER", KEYS[2], id) == 0 then
    return {"seen", "", ""}
  end
  if ARGV[14] ~= "" then
    -- The next step joins before this one leaves: the chain is never empty in between.
    redis.call("LPUSH", KEYS[11], ARGV[14])
    redis.pcall("SADD", KEYS[8], ARGV[16])
    if redis.call("SADD", KEYS[2], ARGV[15]) == 1 then
      redis.call("SADD", KEYS[3], ARGV[15])
      redis.call("RPUSH", KEYS[6], ARGV[15])
      redis.call("HINCRBY", batch, "total", 1)
    end
    redis.call("HSET", batch, "step", ARGV[17], "step_jid", ARGV[15])
  end
  if ARGV[7] ~= "" then
    redis.call("HSET", KEYS[5], id, ARGV[7])
  end
  redis.call("SREM", KEYS[2], id)
  redis.call("SREM", KEYS[3], id)
  redis.call("HDEL", KEYS[4], id)
  redis.call("HINCRBY", batch, "succeeded", 1)
elseif op == "failure" then
  if redis.call("SISMEMBER", KEYS[2], id) == 0 then
    return {"seen", "", ""}
  end
  redis.call("HSET", KEYS[4], id, ARGV[7])
  if redis.call("SREM", KEYS[3], id) == 1 then
    redis.call("HINCRBY", batch, "failed_jobs", 1)
  end
elseif op == "close" then
  if redis.call("HDEL", batch, "block:" .. id) == 0 then
    return {"seen", "", ""}
  end
  redis.call("HINCRBY", batch, "blocks", -1)
else
  return redis.error_reply("ERR unknown batch op " .. op)
end
redis.call("HSET", batch, "updated_at", now)

-- One callback, once: when `left` (the members it waits for) is empty and it has not
-- fired, mark `name`_at and push its payload (ARGV[a]) to its queue (KEYS[k]); returns
-- its jid when this call pushed it, else "".
local function fire(name, left, k, a)
  if redis.call("SCARD", left) ~= 0 or redis.call("HEXISTS", batch, name .. "_at") == 1 then
    return ""
  end
  redis.call("HSET", batch, name .. "_at", now)
  if ARGV[a] == "" then
    return ""
  end
  place("LPUSH", KEYS[k], ARGV[a], "", KEYS[8], ARGV[a + 2])
  redis.call("HSET", batch, name .. "_jid", ARGV[a + 1])
  return ARGV[a + 1]
end

local fired_complete, fired_success = "", ""
if tonumber(redis.call("HGET", batch, "blocks") or "0") <= 0 then
  fired_complete = fire("complete", KEYS[3], 9, 8)
  fired_success = fire("success", KEYS[2], 10, 11)
end

local ttl = ARGV[5]
if redis.call("HEXISTS", batch, "success_at") == 1 then
  ttl = ARGV[6]
end
for i = 1, 6 do
  redis.call("EXPIRE", KEYS[i], ttl)
end
redis.call("ZADD", KEYS[7], now, ARGV[1])
return {"done", fired_complete, fired_success}
